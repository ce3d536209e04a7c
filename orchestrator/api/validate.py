"""Request validation: sizes, ids, required fields. No business rules here."""

from __future__ import annotations

from datetime import timedelta

from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from orchestrator.engine.errors import InvalidArgument
from orchestrator.engine.limits import Limits

DEFAULT_NAMESPACE = "default"
NAME_LENGTH = 255


def namespace(value: str) -> str:
    value = value or DEFAULT_NAMESPACE
    name("namespace", value)
    return value


def name(field: str, value: str, limit: int = NAME_LENGTH) -> str:
    if not value:
        raise InvalidArgument(f"{field} is required")
    if len(value) > limit:
        raise InvalidArgument(f"{field} is longer than {limit} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise InvalidArgument(f"{field} contains control characters")
    return value


def optional_name(field: str, value: str) -> str:
    return name(field, value) if value else value


def seconds(field: str, value: Duration, *, positive: bool = False) -> float:
    span: timedelta = value.ToTimedelta()
    if span < timedelta(0) or (positive and span == timedelta(0)):
        raise InvalidArgument(f"{field} must be {'positive' if positive else 'zero or more'}")
    return span.total_seconds()


def optional_seconds(msg: Message, field: str) -> float | None:
    if not msg.HasField(field):
        return None
    return seconds(field, getattr(msg, field), positive=True)


def payload_sizes(msg: Message, limits: Limits, path: str = "") -> None:
    """Every Payload anywhere in the request must fit the payload limit."""
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        where = f"{path}{fd.name}"
        items = value if fd.is_repeated else [value]
        for i, item in enumerate(items):
            here = f"{where}[{i}]" if fd.is_repeated else where
            if fd.message_type.full_name == "weft.v1.Payload":
                size = len(item.data)
                if size > limits.payload_bytes:
                    raise InvalidArgument(
                        f"{here} is {size} bytes: the payload limit is {limits.payload_bytes} bytes"
                    )
            elif not fd.message_type.GetOptions().map_entry:
                payload_sizes(item, limits, here + ".")

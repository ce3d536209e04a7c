"""Request validation: sizes, ids, required fields. No business rules here."""

from __future__ import annotations

from datetime import timedelta

from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from orchestrator.engine.errors import InvalidArgument
from orchestrator.engine.limits import Limits

from . import payloads

DEFAULT_NAMESPACE = "default"
NAME_LENGTH = 255


def namespace(value: str) -> str:
    value = value or DEFAULT_NAMESPACE
    name("namespace", value)
    if value == "*":  # in a grant, every namespace; never the name of one
        raise InvalidArgument("'*' is not a namespace name (in a grant it means every namespace)")
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


def workflow_id(field: str, value: str, limits: Limits) -> str:
    """One rule for workflow ids on every RPC: an id that starts a run can always
    reach it again (signal, describe, history, cancel, terminate, replay)."""
    return name(field, value, limits.id_length)


def seconds(field: str, value: Duration, *, positive: bool = False) -> float:
    _duration_form(field, value)
    span: timedelta = value.ToTimedelta()
    if span < timedelta(0) or (positive and span == timedelta(0)):
        raise InvalidArgument(f"{field} must be {'positive' if positive else 'zero or more'}")
    return span.total_seconds()


def optional_seconds(msg: Message, field: str) -> float | None:
    if not msg.HasField(field):
        return None
    return seconds(field, getattr(msg, field), positive=True)


# Strings that land in a column of NAME_LENGTH, and free text with a generous cap.
_NAME_FIELDS = frozenset(
    {"namespace", "identity", "request_id", "name", "version", "task_list", "default_task_list"}
)
_TEXT_FIELDS = frozenset({"reason", "cause", "description"})
TEXT_LENGTH = 32 * 1024
MAX_DURATION_SECONDS = 100 * 365 * 24 * 3600
_MAX_TIMESTAMP = 253402300799  # 9999-12-31T23:59:59Z
_NANOS = 1_000_000_000


def _duration_form(where: str, value: Duration) -> None:
    """A Duration as protobuf defines it: nanos within a second, of the seconds' sign.

    Checked on the raw fields, before anything converts it: a malformed one
    would otherwise be read as some other length, or overflow."""
    secs, nanos = value.seconds, value.nanos
    if not -_NANOS < nanos < _NANOS or (secs > 0 and nanos < 0) or (secs < 0 and nanos > 0):
        raise InvalidArgument(
            f"{where} is not a well-formed duration (seconds {secs}, nanos {nanos})"
        )


def request(msg: Message, limits: Limits, path: str = "") -> None:
    """Checks every request gets before any handler runs: payload sizes, string
    lengths and characters, duration and timestamp ranges, anywhere in the
    message. What passes here fits the database."""
    for fd, value in msg.ListFields():
        where = f"{path}{fd.name}"
        if fd.type == fd.TYPE_STRING:
            for i, text in enumerate(value if fd.is_repeated else [value]):
                _string(f"{where}[{i}]" if fd.is_repeated else where, fd.name, text, limits)
            continue
        if fd.message_type is None:
            continue
        items = value if fd.is_repeated else [value]
        for i, item in enumerate(items):
            here = f"{where}[{i}]" if fd.is_repeated else where
            kind = fd.message_type.full_name
            if kind == "weft.v1.Payload":
                payloads.check(here, item, limits)
            elif kind == "google.protobuf.Duration":
                _duration_form(here, item)
                if abs(item.seconds) > MAX_DURATION_SECONDS:
                    raise InvalidArgument(f"{here} is longer than 100 years")
            elif kind == "google.protobuf.Timestamp":
                if not 0 <= item.seconds <= _MAX_TIMESTAMP or not 0 <= item.nanos < _NANOS:
                    raise InvalidArgument(f"{here} is not between 1970 and 9999")
            elif not fd.message_type.GetOptions().map_entry:
                request(item, limits, here + ".")


def _string(where: str, field: str, text: str, limits: Limits) -> None:
    if "\x00" in text:
        raise InvalidArgument(f"{where} contains a NUL character")
    if field in _NAME_FIELDS:
        if len(text) > NAME_LENGTH:
            raise InvalidArgument(f"{where} is longer than {NAME_LENGTH} characters")
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
            raise InvalidArgument(f"{where} contains control characters")
    elif field in _TEXT_FIELDS:
        if len(text) > TEXT_LENGTH:
            raise InvalidArgument(f"{where} is longer than {TEXT_LENGTH} characters")
    elif field == "definition":
        size = len(text.encode())
        if size > limits.definition_bytes:
            raise InvalidArgument(
                f"{where} is {size} bytes: the definition limit is {limits.definition_bytes} bytes"
            )
    elif len(text) > limits.id_length:
        raise InvalidArgument(f"{where} is longer than {limits.id_length} characters")

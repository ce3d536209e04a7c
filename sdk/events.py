"""History events as plain Python: `Event(event_id, type, timestamp, attributes)`.

`attributes` is a dict with the snake_case names of the history (CONTRACT.md):
payloads are decoded to their JSON values, durations are seconds (float),
timestamps are RFC 3339 strings, fields left at their default are omitted. This
is also the shape of `weft history --json`, so a history saved from the
command line loads back with `events_from_json` (golden-history tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from google.protobuf.message import Message

from sdk import stamps
from sdk.api.weft.v1 import history_pb2 as h
from sdk.converter import DEFAULT_CONVERTER, PayloadConverter, PayloadDecodeError

# Every event type, named from the history's `attributes` oneof (each field's
# name in CamelCase), as the server names them (orchestrator/engine/events.py
# derives its own the same way; the server may not import this module, and
# tests/test_rule_copies.py holds the two equal). The sets below are parts of it.
EVENT_TYPES: frozenset[str] = frozenset(
    "".join(part.capitalize() for part in f.name.split("_"))
    for f in h.HistoryEvent.DESCRIPTOR.oneofs_by_name["attributes"].fields
    if f.message_type
)

CLOSE_TYPES = frozenset(
    {
        "WorkflowSuccess",
        "WorkflowFailed",
        "WorkflowTimedOut",
        "WorkflowCanceled",
        "WorkflowTerminated",
        "WorkflowContinuedAsNew",
    }
)
# How a scheduled activity ends.
ACTIVITY_CLOSE_TYPES = frozenset(
    {
        "ActivitySuccess",
        "ActivityFailed",
        "ActivityTimedOut",
        "ActivityScheduledTimeout",
        "ActivityCanceled",
    }
)
# How a started child run ends, as its parent's history tells it.
CHILD_CLOSE_TYPES = frozenset(
    {
        "ChildWorkflowSuccess",
        "ChildWorkflowFailed",
        "ChildWorkflowTimedOut",
        "ChildWorkflowCanceled",
        "ChildWorkflowTerminated",
    }
)
assert CLOSE_TYPES | ACTIVITY_CLOSE_TYPES | CHILD_CLOSE_TYPES <= EVENT_TYPES


@dataclass(frozen=True)
class Event:
    """One event of a workflow run's history."""

    event_id: int
    type: str
    timestamp: datetime
    attributes: dict[str, Any] = field(default_factory=dict)
    principal: str = ""
    """Who caused it, as the server authenticated them ("key:<id>",
    "certificate:<subject>"); empty for the service's own events, and on a
    server without authentication."""

    def get(self, name: str, default: Any = None) -> Any:
        return self.attributes.get(name, default)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "event_id": self.event_id,
            "type": self.type,
            "timestamp": rfc3339(self.timestamp),
            "attributes": self.attributes,
        }
        if self.principal:
            doc["principal"] = self.principal
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Event:
        stamp = datetime.fromisoformat(str(doc["timestamp"]).replace("Z", "+00:00"))
        return cls(
            int(doc["event_id"]),
            str(doc["type"]),
            stamp,
            dict(doc.get("attributes", {})),
            str(doc.get("principal", "")),
        )


def rfc3339(moment: datetime) -> str:
    text = moment.astimezone(UTC).isoformat(timespec="microseconds")
    return text.replace("+00:00", "Z")


def event_from_proto(
    msg: h.HistoryEvent, converter: PayloadConverter = DEFAULT_CONVERTER, *, strict: bool = False
) -> Event:
    """The event as plain Python. A payload that cannot be decoded becomes an
    `UndecodablePayload`; with `strict` (a decider, which must not decide on
    half a history) it raises `PayloadDecodeError` naming the event instead."""
    kind = msg.WhichOneof("attributes")
    try:
        attrs = message_to_dict(getattr(msg, kind), converter, strict=strict) if kind else {}
    except PayloadDecodeError as exc:
        raise PayloadDecodeError(f"event {msg.event_id} ({msg.type}): {exc}") from None
    stamp = stamps.to_datetime(msg.timestamp)
    return Event(msg.event_id, msg.type, stamp, attrs, msg.principal)


def events_from_json(doc: dict[str, Any] | list[dict[str, Any]]) -> list[Event]:
    """Events from `weft history --json` output (the whole document or its list)."""
    items = doc["events"] if isinstance(doc, dict) else doc
    return [Event.from_json(item) for item in items]


def message_to_dict(
    msg: Message, converter: PayloadConverter = DEFAULT_CONVERTER, *, strict: bool = False
) -> dict[str, Any]:
    """A protobuf message as JSON-ready Python values (see the module docstring)."""
    out: dict[str, Any] = {}
    for fd, value in msg.ListFields():
        name, repeated, read = _FIELDS.get(fd) or _field(fd)
        if repeated:
            out[name] = [read(v, converter, strict) for v in value]
        else:
            out[name] = read(value, converter, strict)
    return out


# Each field's name, whether it repeats, and how its values read, worked out
# once per field (a decider decodes every event it is sent with these).
_Read = Callable[[Any, PayloadConverter, bool], Any]
_FIELDS: dict[Any, tuple[str, bool, _Read]] = {}


def _field(fd: Any) -> tuple[str, bool, _Read]:
    entry = _FIELDS[fd] = (fd.name, fd.is_repeated, _reader(fd))
    return entry


def _reader(fd: Any) -> _Read:
    if fd.type == fd.TYPE_ENUM:
        names = {number: value.name for number, value in fd.enum_type.values_by_number.items()}
        return lambda value, converter, strict: names[value]
    if fd.message_type is None:
        return lambda value, converter, strict: value
    kind = fd.message_type.full_name
    if kind == "weft.v1.Payload":
        return _payload
    if kind == "google.protobuf.Duration":
        return lambda value, converter, strict: value.ToTimedelta().total_seconds()
    if kind == "google.protobuf.Timestamp":
        return lambda value, converter, strict: rfc3339(stamps.to_datetime(value))
    return lambda value, converter, strict: message_to_dict(value, converter, strict=strict)


def _payload(value: Any, converter: PayloadConverter, strict: bool) -> Any:
    return converter.decode(value) if strict else converter.decode_lenient(value)

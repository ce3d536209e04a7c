"""Request validation: sizes, ids, required fields. No business rules here."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from orchestrator.engine.errors import InvalidArgument
from orchestrator.engine.limits import Limits

from . import payloads

DEFAULT_NAMESPACE = "default"
NAME_LENGTH = 255
_CONTROL = re.compile("[\x00-\x1f\x7f]")  # C0 control characters and DEL


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
    if _CONTROL.search(value):
        raise InvalidArgument(f"{field} contains control characters")
    return value


def optional_name(field: str, value: str) -> str:
    return name(field, value) if value else value


def workflow_id(field: str, value: str, limits: Limits) -> str:
    """One rule for workflow ids on every RPC: an id that starts a run can always
    reach it again (signal, describe, history, cancel, terminate, replay)."""
    return name(field, value, limits.id_length)


def new_workflow_id(field: str, value: str, limits: Limits) -> str:
    """The id of a run being started: also not of spaces only, which shows as
    nothing in every listing (only here: a run started before this rule can
    still be reached)."""
    workflow_id(field, value, limits)
    if not value.strip():
        raise InvalidArgument(f"{field} is only whitespace")
    return value


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
        rule = _RULES.get(fd) or _rule_of(fd)
        check = rule.check
        if check is None:
            continue
        if rule.repeated:
            for i, item in enumerate(value):
                check(rule, item, limits, path, i)
        else:
            check(rule, value, limits, path, 0)


class _Text(enum.Enum):
    NAME = "lands in a column of NAME_LENGTH"
    TEXT = "free text, up to TEXT_LENGTH"
    DEFINITION = "a step workflow's definition, up to the definition limit"
    ID = "an id or anything else, up to the id length"


@dataclass(frozen=True, slots=True)
class _Rule:
    """What `request` checks of one field, worked out once per field."""

    name: str
    repeated: bool
    check: Callable[[_Rule, Any, Limits, str, int], None] | None
    """None for scalars, bytes, enums and maps: nothing to check."""
    text: _Text


# Per field descriptor (descriptors live as long as the process): the rule.
_RULES: dict[FieldDescriptor, _Rule] = {}


def _rule_of(fd: FieldDescriptor) -> _Rule:
    check: Callable[[_Rule, Any, Limits, str, int], None] | None = None
    if fd.type == fd.TYPE_STRING:
        check = _string
    elif fd.message_type is not None and not fd.message_type.GetOptions().map_entry:
        check = _MESSAGE_CHECKS.get(fd.message_type.full_name, _message)
    if fd.name in _NAME_FIELDS:
        text = _Text.NAME
    elif fd.name in _TEXT_FIELDS:
        text = _Text.TEXT
    else:
        text = _Text.DEFINITION if fd.name == "definition" else _Text.ID
    rule = _RULES[fd] = _Rule(fd.name, fd.is_repeated, check, text)
    return rule


def _payload(rule: _Rule, item: Any, limits: Limits, path: str, i: int) -> None:
    payloads.check(_where(path, rule, i), item, limits)


def _duration(rule: _Rule, item: Any, limits: Limits, path: str, i: int) -> None:
    _duration_form(_where(path, rule, i), item)
    if abs(item.seconds) > MAX_DURATION_SECONDS:
        raise InvalidArgument(f"{_where(path, rule, i)} is longer than 100 years")


def _timestamp(rule: _Rule, item: Any, limits: Limits, path: str, i: int) -> None:
    if not 0 <= item.seconds <= _MAX_TIMESTAMP or not 0 <= item.nanos < _NANOS:
        raise InvalidArgument(f"{_where(path, rule, i)} is not between 1970 and 9999")


def _message(rule: _Rule, item: Any, limits: Limits, path: str, i: int) -> None:
    request(item, limits, _where(path, rule, i) + ".")


_MESSAGE_CHECKS: dict[str, Callable[[_Rule, Any, Limits, str, int], None]] = {
    "weft.v1.Payload": _payload,
    "google.protobuf.Duration": _duration,
    "google.protobuf.Timestamp": _timestamp,
}


def _where(path: str, rule: _Rule, i: int) -> str:
    """A field's place in the request, as error messages name it: `a.b[2].c`."""
    return f"{path}{rule.name}[{i}]" if rule.repeated else f"{path}{rule.name}"


def _string(rule: _Rule, text: Any, limits: Limits, path: str, i: int) -> None:
    if "\x00" in text:
        raise InvalidArgument(f"{_where(path, rule, i)} contains a NUL character")
    if rule.text is _Text.NAME:
        if len(text) > NAME_LENGTH:
            raise InvalidArgument(
                f"{_where(path, rule, i)} is longer than {NAME_LENGTH} characters"
            )
        if _CONTROL.search(text):
            raise InvalidArgument(f"{_where(path, rule, i)} contains control characters")
    elif rule.text is _Text.TEXT:
        if len(text) > TEXT_LENGTH:
            raise InvalidArgument(
                f"{_where(path, rule, i)} is longer than {TEXT_LENGTH} characters"
            )
    elif rule.text is _Text.DEFINITION:
        size = len(text.encode())
        if size > limits.definition_bytes:
            raise InvalidArgument(
                f"{_where(path, rule, i)} is {size} bytes: the definition limit is"
                f" {limits.definition_bytes} bytes"
            )
    elif len(text) > limits.id_length:
        raise InvalidArgument(
            f"{_where(path, rule, i)} is longer than {limits.id_length} characters"
        )

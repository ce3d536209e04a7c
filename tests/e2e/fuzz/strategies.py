"""Hypothesis strategies for requests a careless or hostile client could send:
each leaf mixes plausible values (so that requests get past the first check and
reach the engine) with hostile ones (limits ± 1, control and odd Unicode
characters, malformed durations, payloads that are not JSON or not UTF-8, deep
nesting, forged page and task tokens, unknown enum values).

Requests are built from the message descriptors, so a field added to the proto
is fuzzed without a change here; `Hints` lets a test steer named fields toward
values that reach a run of its own (its workflow id, task lists and tokens).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d

Strategy = st.SearchStrategy
Hints = Mapping[str, Callable[[], Strategy[Any]]]
"""Field name -> a strategy of plausible values for it, mixed in with the hostile ones."""

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
ID_LIMIT = 1000  # Limits.id_length
NAME_LIMIT = 255  # validate.NAME_LENGTH
TEXT_LIMIT = 32 * 1024  # validate.TEXT_LENGTH
PAYLOAD_LIMIT = 256 * 1024  # Limits.payload_bytes
DEPTH_LIMIT = 100  # Limits.payload_depth
CENTURY = 100 * 365 * 24 * 3600  # validate.MAX_DURATION_SECONDS


def fuzz_settings(examples: int) -> settings:
    """Bounded, and the same examples on every run: derandomized, no example
    database (a failure in CI is reproduced by running the test again). No
    shrinking: each step costs calls to a server, and Hypothesis would spend up to
    five minutes on it; the failing request is printed as it was."""
    return settings(
        max_examples=examples,
        phases=[Phase.explicit, Phase.generate],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# -- text -------------------------------------------------------------------------------

ODD_TEXT = [
    "",
    " ",
    "default",
    "\x00",
    "a\x00b",
    "line\nbreak",
    "tab\there",
    "\x1b]0;title\x07",  # a terminal title-setting escape
    "\x1b[2J",
    "\x7f",
    "\u202eevil",  # right-to-left override
    "\ufeffbom",
    "\u200b",
    "\U0001f4a9",
    "e\u0301",  # combining accent
    "\ud7ff\ue000\uffff",
    "Ω≈ç√",
    "%s%n%x",
    "'; DROP TABLE runs; --",
    "../../etc/passwd",
    "null",
    "NaN",
    "${{ x }}",
]


def _lengths(limit: int) -> list[str]:
    """Strings at and around a limit, in one- and multi-byte characters."""
    return ["a" * (limit - 1), "a" * limit, "a" * (limit + 1), "é" * limit, "\U0001f600" * limit]


def hostile_text(*limits: int) -> Strategy[str]:
    sized = [s for limit in limits for s in _lengths(limit)]
    return st.one_of(
        st.sampled_from(ODD_TEXT + sized),
        st.text(max_size=12),
        st.text(st.characters(codec="utf-8", max_codepoint=0x9F), max_size=8),
    )


def text_for(field: str) -> Strategy[str]:
    """Hostile values for a string field, sized around the limit that field has."""
    if field in {"reason", "cause", "description"}:
        return hostile_text(TEXT_LIMIT)
    if field == "definition":
        return st.one_of(
            hostile_text(),
            st.just("name: x\nsteps:\n  - return: 1\n"),
            st.just('a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a]\n'),
            st.just("x" * (PAYLOAD_LIMIT + 1)),
        )
    return hostile_text(NAME_LIMIT, ID_LIMIT)


# -- payloads -----------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


def _nested(depth: int, open_: bytes = b"[", close: bytes = b"]") -> bytes:
    return open_ * depth + close * depth


ODD_DATA = [
    b"",
    b"{",
    b"[1,]",
    b"{'a': 1}",
    b"NaN",
    b"[NaN]",
    b'{"a": Infinity}',
    b"-Infinity",
    b"1e999",
    b"-0",
    b"9" * 5000,  # past Python's int-from-string digit limit
    b"\xff\xfe",
    b'"\xc3\x28"',  # invalid UTF-8 inside a JSON string
    b'"\xed\xa0\x80"',  # an encoded surrogate: not UTF-8
    b'"\\ud800"',  # a lone surrogate escape: JSON, but not text
    b"\xef\xbb\xbf{}",  # a byte-order mark
    '{"a": 1}'.encode("utf-16"),
    b'{"a": 1}\x00',
    b'{"a": 1} {"b": 2}',
    b"\x00\x01\x02",
    _nested(DEPTH_LIMIT - 1),
    _nested(DEPTH_LIMIT),
    _nested(DEPTH_LIMIT + 1),
    _nested(1000),
    _nested(50_000),
    b'{"a":' * 200 + b"1" + b"}" * 200,
    b'["' + b"]" * 300 + b'"]',  # brackets inside a string do not nest
    b"x" * (PAYLOAD_LIMIT + 1),
    b'"' + b"x" * (PAYLOAD_LIMIT - 2) + b'"',
]


def payloads() -> Strategy[c.Payload]:
    data = st.one_of(
        st.sampled_from(ODD_DATA),
        JSON_VALUES.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=32),
    )
    encodings = st.sampled_from(["json", "", "raw", "JSON", "binary/null"])
    encoding = st.one_of(encodings, hostile_text())
    return st.builds(c.Payload, data=data, encoding=encoding)


# -- numbers, durations, timestamps --------------------------------------------------------


def ints(low: int, high: int, *special: int) -> Strategy[int]:
    edges = [v for v in (0, 1, -1, low, high, low + 1, high - 1, *special) if low <= v <= high]
    return st.sampled_from(edges) | st.integers(low, high)


def durations() -> Strategy[Duration]:
    """Durations as raw fields: in range, out of range, and malformed (nanos of the
    other sign, or past a second). A Duration has no NaN: its two fields are integers."""
    seconds = ints(*INT64, CENTURY, CENTURY + 1, 315_576_000_000, 315_576_000_001, 2**62, 10)
    nanos = ints(*INT32, 999_999_999, 1_000_000_000, -999_999_999, -1_000_000_000, 1000)
    return st.builds(Duration, seconds=seconds, nanos=nanos)


def timestamps() -> Strategy[Timestamp]:
    seconds = ints(*INT64, 253_402_300_799, 253_402_300_800, 1_700_000_000)
    nanos = ints(*INT32, 999_999_999, 1_000_000_000)
    return st.builds(Timestamp, seconds=seconds, nanos=nanos)


# -- page and task tokens -------------------------------------------------------------------

ODD_TOKENS = [
    b"",
    b"null",
    b"[]",
    b"{}",
    b'"x"',
    b'["run", 1, 0]',
    b'["run", -1, 0]',
    b'["run", 1.5, 0]',
    b'["run", true, 0]',
    b'["run", 1e400, 0]',
    b'["run", 99999999999999999999999, 0]',
    b'["run", 9223372036854775808, 9223372036854775807]',
    b'["2024-01-01T00:00:00", "run"]',
    b'["not a date", "run"]',
    b'["9999-12-31T23:59:59.999999", ""]',
    b'[["run"], 1, 0]',
    b"[" * 4000 + b"]" * 4000,
    b"[" * 100_000,
    b"\xff\xfe\x00",
    b"\x01" + b"\x00" * 16 + b'["default","wf","run","decision",1,2,1]',
    b"\x01" + b"\x00" * 16 + b"[",
    b"\x01",
]


def cursor_ints() -> Strategy[int]:
    """Event ids a page token could carry: real ones, and past int64 either way."""
    return st.sampled_from([2**63, 1, 2**70, 0, 5, -1, 2**63 - 1]) | st.integers(0, 50)


def tokens() -> Strategy[bytes]:
    return st.one_of(
        st.sampled_from(ODD_TOKENS),
        st.binary(max_size=48),
        st.lists(st.one_of(st.text(max_size=6), st.integers(), st.none()), max_size=4).map(
            lambda v: json.dumps(v).encode()
        ),
    )


# -- messages from their descriptors ----------------------------------------------------------

MAX_DEPTH = 4
HOSTILITY = [0, 3, 8, 30]
"""Percent of fields made hostile, drawn per request: mostly-plausible requests get
past the first checks and test the later ones; very hostile ones test the first."""
UNSET = 6  # percent of the remaining scalar fields left unset


def hostile(fd: FieldDescriptor) -> Strategy[Any]:
    """Hostile values of a scalar, payload, duration, timestamp or token field."""
    kind = fd.message_type.full_name if fd.message_type is not None else ""
    if kind == "weft.v1.Payload":
        return payloads()
    if kind == "google.protobuf.Duration":
        return durations()
    if kind == "google.protobuf.Timestamp":
        return timestamps()
    if fd.type == fd.TYPE_STRING:
        return text_for(fd.name)
    if fd.type == fd.TYPE_BYTES:
        return tokens()
    if fd.type == fd.TYPE_BOOL:
        return st.booleans()
    if fd.enum_type is not None:
        known = [v.number for v in fd.enum_type.values]
        return st.sampled_from(known) | ints(*INT32, max(known) + 1)
    if fd.type in (fd.TYPE_INT32, fd.TYPE_SINT32, fd.TYPE_SFIXED32):
        return ints(*INT32, 1000, 1001)
    if fd.type in (fd.TYPE_INT64, fd.TYPE_SINT64, fd.TYPE_SFIXED64):
        return ints(*INT64)
    raise NotImplementedError(f"no strategy for {fd.full_name}")


def _day(seconds: int) -> Duration:
    return Duration(seconds=seconds)


def plausible(fd: FieldDescriptor, hints: Hints) -> Strategy[Any]:
    """Values a careful client would send (or the test's own ids, by `hints`)."""
    hint = hints.get(fd.name)
    if hint is not None:
        return hint()
    kind = fd.message_type.full_name if fd.message_type is not None else ""
    if kind == "weft.v1.Payload":
        return JSON_VALUES.map(lambda v: c.Payload(data=json.dumps(v).encode(), encoding="json"))
    if kind == "google.protobuf.Duration":
        return st.sampled_from([1, 60, 86_400]).map(_day)
    if kind == "google.protobuf.Timestamp":
        return st.sampled_from([0, 1_700_000_000]).map(lambda s: Timestamp(seconds=s))
    if fd.type == fd.TYPE_STRING:
        return st.sampled_from(["x", "fuzz", "a-1"])
    if fd.type == fd.TYPE_BYTES:
        return st.just(b"")
    if fd.enum_type is not None:
        return st.sampled_from([v.number for v in fd.enum_type.values])
    if fd.type == fd.TYPE_BOOL:
        return st.booleans()
    return st.integers(0, 10)


class _Plan:
    """Which fields of one request are hostile: either each with a drawn
    percentage (`hostility`), or exactly one, the `countdown`-th leaf met (none
    if the request has fewer). One hostile value in an otherwise plausible
    request reaches the check meant for it, not the first check on the way."""

    def __init__(self, hostility: int, countdown: int = -1) -> None:
        self.hostility = hostility
        self.countdown = countdown

    def leaf_is_hostile(self, roll: int) -> bool:
        if self.countdown >= 0:
            self.countdown -= 1
            return self.countdown == -1
        return roll >= 100 - self.hostility


@st.composite
def _plans(draw: st.DrawFn) -> _Plan:
    if draw(st.booleans()):
        return _Plan(0, draw(st.integers(0, 8)))
    return _Plan(draw(st.sampled_from(HOSTILITY)))


@st.composite
def messages(
    draw: st.DrawFn,
    desc: Descriptor,
    hints: Hints,
    plan: _Plan | None = None,
    depth: int = 0,
) -> Message:
    """A message of type `desc`: each field plausible, unset, or hostile as the
    drawn plan says, nested messages alike."""
    if plan is None:
        plan = draw(_plans())
    msg = message_factory.GetMessageClass(desc)()
    for fd in desc.fields:
        # High rolls are the rare choices: Hypothesis favours small draws (and
        # shrinks toward them), which should mean "plausible".
        roll = draw(st.integers(0, 99))
        kind = fd.message_type.full_name if fd.message_type is not None else ""
        if kind == "weft.v1.Decision":
            value: Any = draw(st.lists(decisions(hints), max_size=4))
        elif fd.message_type is not None and kind.startswith("weft.") and kind != "weft.v1.Payload":
            # A request without its execution or type is refused at once: that
            # is a hostile choice, not a plausible one.
            if depth >= MAX_DEPTH or roll >= 100 - plan.hostility // 2:
                continue
            one = messages(fd.message_type, hints, plan, depth + 1)
            value = draw(st.lists(one, max_size=3) if fd.is_repeated else one)
        elif plan.leaf_is_hostile(roll):
            value = draw(st.lists(hostile(fd), max_size=3) if fd.is_repeated else hostile(fd))
        elif roll >= 100 - plan.hostility - UNSET:
            continue
        else:
            one = plausible(fd, hints)
            value = draw(st.lists(one, max_size=3) if fd.is_repeated else one)
        _set(msg, fd.name, value)
    return msg


def _set(msg: Message, name: str, value: Any) -> None:
    if isinstance(value, list):
        getattr(msg, name).extend(value)
    elif isinstance(value, Message):
        getattr(msg, name).CopyFrom(value)
    else:
        setattr(msg, name, value)


# -- decisions ----------------------------------------------------------------------------

KNOWN_IDS = ["a-1", "t-1", "L-1"]
"""Ids the prepared runs use (an activity, a timer, a lock): decisions that name
them meet a run that has them."""


def decision_ids() -> Strategy[str]:
    return st.sampled_from([*KNOWN_IDS, "b", "b", "other"])


DECISION_HINTS: dict[str, Callable[[], Strategy[Any]]] = {
    "activity_id": decision_ids,
    "timer_id": decision_ids,
    "lock_name": decision_ids,
    "marker_name": lambda: st.sampled_from(["m", "retention"]),
    "signal_name": lambda: st.just("go"),
    "name": lambda: st.sampled_from(["act", "order"]),
    "version": lambda: st.sampled_from(["", "1"]),
    "workflow_id": lambda: st.sampled_from(["child-1", "child-2", "nobody"]),
}


def _one_decision(kind: str, attrs: Message) -> d.Decision:
    out = d.Decision()
    getattr(out, kind).CopyFrom(attrs)
    return out


def decisions(hints: Hints) -> Strategy[d.Decision]:
    """One decision of any kind (or none set), its attributes mostly plausible.

    Ids come from a small pool, so a list repeats them (duplicate activity and
    timer ids) and names ones the run has, had, or never had."""
    merged = {**DECISION_HINTS, **hints}
    kinds: list[FieldDescriptor | None] = list(d.Decision.DESCRIPTOR.fields)

    def of_kind(fd: FieldDescriptor | None) -> Strategy[d.Decision]:
        if fd is None or fd.message_type is None:
            return st.just(d.Decision())  # no attributes at all
        return messages(fd.message_type, merged).map(lambda attrs: _one_decision(fd.name, attrs))

    return st.sampled_from([*kinds, None]).flatmap(of_kind)

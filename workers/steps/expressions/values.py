"""Values as text, truth, loose equality and order, shared by references,
`let`, conditions and transforms."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from sdk.durations import parse_duration
from workers.steps.expressions.base import ABSENT
from workers.steps.limits import (
    MAX_NUMBER_CHARS,
)


@dataclass(frozen=True)
class _Duration:
    """A duration inside `let`; `spelling` is how it was written, if it was."""

    delta: timedelta
    spelling: str | None = None


@dataclass(frozen=True)
class _Instant:
    """A timestamp inside `let`; `spelling` is how it was written, if it was."""

    moment: datetime
    spelling: str | None = None


def _format_duration(delta: timedelta) -> str:
    """A duration as `parse_duration` reads it: 5400s → "1h30m"."""
    total_ms = round(delta / timedelta(milliseconds=1))
    sign, total_ms = ("-", -total_ms) if total_ms < 0 else ("", total_ms)
    if total_ms == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, total_ms = divmod(total_ms, size)
        if count:
            out.append(f"{count}{unit}")
    if total_ms:
        out.append(f"{total_ms}ms")
    return sign + "".join(out)


def text(value: Any) -> str:
    """How a value reads inside text: JSON for maps and lists, `true`/`false`,
    `null`; an absent value is empty."""
    if isinstance(value, str):
        return value
    if value is ABSENT:
        return ""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _Duration):
        return value.spelling or _format_duration(value.delta)
    if isinstance(value, _Instant):
        return value.spelling or value.moment.isoformat()
    if isinstance(value, timedelta):
        return _format_duration(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, ensure_ascii=False, default=text)
    return str(value)


def truthy(value: Any) -> bool:
    """Brooklyn's truth: absent, null, false, 0, empty text, empty collections
    and the words `false` and `no` are false; everything else is true."""
    if value is ABSENT or value is None:
        return False
    if isinstance(value, str):
        return value.strip().lower() not in ("", "false", "no")
    if isinstance(value, _Duration):
        return bool(value.delta)
    if isinstance(value, bool | int | float | Mapping | list | tuple):
        return bool(value)
    return True


_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?)?"
    r"(?:Z|[+-][0-9]{2}:?[0-9]{2})?"
)


def _parse_number(value: str) -> int | float | None:
    """A number written as text (`3`, `-2.5`, `1e3`), or None."""
    stripped = value.strip()
    if len(stripped) > MAX_NUMBER_CHARS or not _NUMBER.fullmatch(stripped):
        return None
    if re.fullmatch(r"-?[0-9]+", stripped):
        return int(stripped)
    return float(stripped)


def _real(value: Any) -> int | float | None:
    """`value` if it is a number (booleans are not)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return None


def _numeric(value: Any) -> int | float | None:
    """A number, or a text that reads as one."""
    if isinstance(value, str):
        return _parse_number(value)
    return _real(value)


def _as_duration(value: Any) -> timedelta | None:
    if isinstance(value, _Duration):
        return value.delta
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError:
            return None
    return None


def _as_instant(value: Any) -> datetime | None:
    if isinstance(value, _Instant):
        return value.moment
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and _TIMESTAMP.fullmatch(value.strip()):
        try:
            return datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    return None


def _is_temporal(value: Any) -> bool:
    return isinstance(value, _Duration | _Instant | timedelta | datetime)


def loose_equals(left: Any, right: Any) -> bool:
    """Equality as conditions and `==` see it: numbers by value, a text equal
    to a number or boolean it spells (`"1"` = 1, `"true"` = true), a text equal
    to the map or list its JSON parses to, collections element by element."""
    if left is ABSENT or right is ABSENT:
        return left is right
    if _is_temporal(left) or _is_temporal(right):
        return _temporal_equals(left, right)
    if isinstance(left, bool) or isinstance(right, bool):
        return _bool_equals(left, right)
    if _real(left) is not None and _real(right) is not None:
        return bool(left == right)
    if isinstance(left, str) and _real(right) is not None:
        return bool(_parse_number(left) == right)
    if isinstance(right, str) and _real(left) is not None:
        return bool(_parse_number(right) == left)
    if isinstance(left, str) and isinstance(right, Mapping | list | tuple):
        return _json_equals(left, right)
    if isinstance(right, str) and isinstance(left, Mapping | list | tuple):
        return _json_equals(right, left)
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(loose_equals(left[k], right[k]) for k in left)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(map(loose_equals, left, right))
    return bool(left == right)


def _temporal_equals(left: Any, right: Any) -> bool:
    durations = _as_duration(left), _as_duration(right)
    if durations[0] is not None and durations[1] is not None:
        return durations[0] == durations[1]
    instants = _as_instant(left), _as_instant(right)
    if instants[0] is not None and instants[1] is not None:
        try:
            return instants[0] == instants[1]
        except TypeError:
            return False
    return False


def _bool_equals(left: Any, right: Any) -> bool:
    if isinstance(left, bool) and isinstance(right, bool):
        return left == right
    flag, other = (left, right) if isinstance(left, bool) else (right, left)
    return isinstance(other, str) and other.strip().lower() == ("true" if flag else "false")


def _json_equals(source: str, value: Any) -> bool:
    try:
        parsed = json.loads(source)
    except ValueError:
        return False
    return isinstance(parsed, Mapping | list) and loose_equals(parsed, value)


def _natural_key(value: str) -> list[tuple[int, int, str]]:
    """Order texts with their digit runs as numbers: "a9" < "a10"."""
    return [
        (0, int(chunk), chunk) if chunk[0] in "0123456789" else (1, 0, chunk)
        for chunk in re.split(r"([0-9]+)", value)
        if chunk
    ]


def compare(left: Any, right: Any) -> int | None:
    """-1, 0 or 1 ordering two values, or None if they do not compare. Numbers
    (and numeric texts), then durations, then timestamps, then texts."""
    if isinstance(left, bool) or isinstance(right, bool):
        return None
    pairs: list[tuple[Any, Any]] = [
        (_numeric(left), _numeric(right)),
        (_as_duration(left), _as_duration(right)),
        (_as_instant(left), _as_instant(right)),
    ]
    if isinstance(left, str) and isinstance(right, str):
        pairs.append((_natural_key(left), _natural_key(right)))
    for a, b in pairs:
        if a is not None and b is not None:
            try:
                return int(a > b) - int(a < b)
            except TypeError:  # a naive and an aware timestamp
                return None
    return None


def _type_name(value: Any) -> str:
    for kind, name in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a double"),
        (str, "text"),
        (Mapping, "a map"),
        (list | tuple, "a list"),
        (_Duration | timedelta, "a duration"),
        (_Instant | datetime, "a timestamp"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


_NOT_LITERAL: Final = object()
_LITERALS: Final[dict[str, Any]] = {"true": True, "false": False, "null": None}


def _literal(word: str) -> Any:
    """A bare word that is a number, `true`, `false` or `null`, else _NOT_LITERAL."""
    if word in _LITERALS:
        return _LITERALS[word]
    number = _parse_number(word)
    return _NOT_LITERAL if number is None else number

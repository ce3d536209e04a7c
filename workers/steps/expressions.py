"""Values inside steps: `${…}` references, the `let` expression language and types.

References
----------
`${a.b[0]["k"]}` reads a path: the first name comes from the scope
(`Scope.root`), the rest walks maps (`.key`, `["key"]`) and lists (`[0]`,
`.0`, negative indices from the end). Anything missing is an `UnknownName`,
whose message names the whole path. `${x ?? y ?? 'text'}` tries each
alternative in turn, skipping unknown and null ones; an alternative is a path,
a quoted text, a number, `true`, `false` or `null`. `$${` is a literal `${`.

A string that is exactly one `${…}` gives the value with its type. Inside
other text a value is written as text: strings as they are, `true`/`false`,
`null`, numbers as Python writes them, maps and lists as JSON. (Brooklyn
refuses null and maps inside text; writing them as JSON is more useful in log
messages and costs nothing.) Every value given back is a copy, so changing a
variable set from another never changes the other.

The `let` language
------------------
Only `let` computes (STEPS.md). Its text is read in one of two ways:

- Without any operator word it is plain text: one word gives a typed value
  (`5` → 5, `true`, `null`, `${x}` keeps its type, a quoted text is taken
  literally); several words are joined as text, keeping the spacing between
  them, so `let output = timed out` gives "timed out".
- With operators (which must stand alone, with spaces around them), it is an
  expression. Loosest to tightest: `c ? a : b`, `??`, `||`, `&&`, comparisons
  (`== != < <= > >=`, not chained), `+ -`, `* / %`, unary `-`; parentheses
  group. Operands are words as above; bare words that read as durations (`5m`,
  `1h30m`) or ISO timestamps (`2024-05-01T10:00:00Z`) take those types.

Arithmetic: ints stay ints, and `/` of two ints is an int when exact (6 / 2 →
3) and a double otherwise (7 / 2 → 3.5), as in Brooklyn. `+` joins as text
when either side is a text (JavaScript's rule), unless the other side is a
duration or timestamp and the text reads as one, or the two texts read as a
timestamp and a duration (`${workflow.util.now} + ${timeout}`); `- * / %`
accept numeric texts. Durations add and subtract, and multiply or divide by numbers; a
timestamp plus or minus a duration is a timestamp, and the difference of two
timestamps a duration. A duration result is text that `parse_duration` reads
back (`1m30s`; a duration written as-is keeps its spelling); a timestamp result
is ISO-8601 text. `==` is the loose equality of conditions (`"1" == 1`);
comparisons order numbers, numeric texts, durations, timestamps and texts
(naturally: "a9" < "a10"). `&&` and `||` give booleans. `??` gives the right
side when the left is null or mentions an unknown name. Quoted words are never
interpolated. The expression is read by a tokenizer and a recursive-descent
parser: nothing is ever executed as code.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, ParamSpec, Protocol, TypeVar

import yaml

from sdk.durations import parse_duration
from workers.steps import yamlbound
from workers.steps.errors import StepInterpreterError
from workers.steps.limits import (
    MAX_EXPRESSION_CHARS,
    MAX_EXPRESSION_DEPTH,
    MAX_INTEGER,
    MAX_NUMBER_CHARS,
    MAX_TEXT_CHARS,
    MAX_VALUE_DEPTH,
    MAX_VALUE_NODES,
)

__all__ = [
    "ABSENT",
    "TYPES",
    "ExpressionError",
    "LimitExceeded",
    "Scope",
    "UnknownName",
    "check_expression",
    "check_value",
    "coerce",
    "compare",
    "evaluate",
    "get_path",
    "interpolate",
    "interpolate_lenient",
    "loose_equals",
    "references",
    "resolve_path",
    "text",
    "text_value",
    "total",
    "truthy",
    "word_value",
    "words",
]


class ExpressionError(StepInterpreterError):
    """A value could not be computed; becomes the step's `ExpressionError`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownName(ExpressionError):
    """A reference names nothing: `??` and condition targets treat it as absent."""


class LimitExceeded(ExpressionError):
    """A value or an expression is past one of the bounds of `limits`."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def total(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """Make `function` total: whatever goes wrong inside it (an overflow, a
    recursion too deep, Python's limit on long int texts, memory) comes out
    as an `ExpressionError`, which the step's `on-error` can handle, instead of
    escaping the interpreter and failing every decision task of the run."""

    @functools.wraps(function)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return function(*args, **kwargs)
        except ExpressionError:
            raise
        except RecursionError:
            raise LimitExceeded("the value or expression nests too deeply") from None
        except MemoryError:
            raise LimitExceeded("the value is too large to compute") from None
        except OverflowError as exc:
            raise ExpressionError(f"a number, duration or time is out of range: {exc}") from None
        except Exception as exc:  # the promise: nothing but an ExpressionError leaves
            raise ExpressionError(f"{type(exc).__name__}: {exc}") from None

    return wrapper


class Scope(Protocol):
    """The names an expression can see."""

    def root(self, name: str) -> Any:
        """The value of a top-level name; raises `UnknownName` if there is none."""
        ...


class _Absent:
    """The type of `ABSENT`: one shared instance, false, kept by copies."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False

    def __copy__(self) -> _Absent:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _Absent:
        return self


# "No value at all" (an unknown name), as opposed to None, a value that is null.
ABSENT: Final[Any] = _Absent()

TYPES: Final = ("integer", "double", "string", "boolean", "map", "list", "json", "yaml")

# -- paths -------------------------------------------------------------------------------

_SEGMENT = re.compile(r"[^\s.\[\]'\"{}$?]+")
_INDEX = re.compile(r"-?[0-9]+")


def _parse_path(path: str) -> list[str | int]:
    """`a.b[0]["k"]` → ["a", "b", 0, "k"]; the first segment is a name."""
    text = path.strip()
    first = _SEGMENT.match(text)
    if first is None:
        raise ExpressionError(f"invalid reference ${{{path}}}: it must start with a name")
    segments: list[str | int] = [first.group()]
    pos = first.end()
    while pos < len(text):
        char = text[pos]
        if char == ".":
            found = _SEGMENT.match(text, pos + 1)
            if found is None:
                raise ExpressionError(f"invalid reference ${{{path}}}: a name must follow '.'")
            segments.append(found.group())
            pos = found.end()
        elif char == "[":
            segment, pos = _bracket(text, pos, path)
            segments.append(segment)
        else:
            raise ExpressionError(f"invalid reference ${{{path}}}: unexpected {char!r}")
    return segments


def _bracket(text: str, pos: int, path: str) -> tuple[str | int, int]:
    """One `[…]` of a path: a quoted key, an index, or a bare key."""
    inner = pos + 1
    if inner < len(text) and text[inner] in "'\"":
        close = text.find(text[inner], inner + 1)
        if close < 0 or text[close + 1 : close + 2] != "]":
            raise ExpressionError(f"invalid reference ${{{path}}}: unterminated [{text[inner]}")
        return text[inner + 1 : close], close + 2
    close = text.find("]", inner)
    if close < 0:
        raise ExpressionError(f"invalid reference ${{{path}}}: missing ']'")
    content = text[inner:close].strip()
    if not content:
        raise ExpressionError(f"invalid reference ${{{path}}}: empty []")
    return (int(content) if _INDEX.fullmatch(content) else content), close + 1


def _show_segment(segment: str | int) -> str:
    return f"[{segment}]" if isinstance(segment, int) else f".{segment}"


def _walk(value: Any, segments: list[str | int], where: str) -> Any:
    """Follow `segments` from `value`, reached by `where` ("" for the value
    itself); a missing step raises UnknownName saying where it stopped."""
    for segment in segments:
        value = _step_into(value, segment, where or "the value")
        where = f"{where}{_show_segment(segment)}" if where else str(segment)
    return value


def _step_into(value: Any, segment: str | int, where: str) -> Any:
    if isinstance(value, Mapping):
        if segment in value:
            return value[segment]
        alternate: str | int = str(segment) if isinstance(segment, int) else segment
        if isinstance(segment, str) and _INDEX.fullmatch(segment):
            alternate = int(segment)
        if alternate in value:
            return value[alternate]
        raise UnknownName(f"{where} has no key {str(segment)!r}")
    if isinstance(value, list | tuple):
        if isinstance(segment, str) and not _INDEX.fullmatch(segment):
            raise UnknownName(f"{where} is a list, it has no key {segment!r}")
        index = int(segment)
        if not -len(value) <= index < len(value):
            raise UnknownName(f"index {index} is out of range for {where} (size {len(value)})")
        return value[index]
    kind = "null" if value is None else _type_name(value)
    raise UnknownName(f"{where} is {kind}, it has no {str(segment)!r}")


@total
def resolve_path(path: str, scope: Scope) -> Any:
    """The value at `path`, its first name looked up in `scope` (not copied)."""
    segments = _parse_path(path)
    name = str(segments[0])
    try:
        value = scope.root(name)
    except UnknownName as exc:
        if len(segments) == 1:
            raise
        raise UnknownName(f"{exc.message} (in ${{{path}}})") from None
    try:
        return _walk(value, segments[1:], name)
    except UnknownName as exc:
        raise UnknownName(f"cannot resolve ${{{path}}}: {exc.message}") from None


@total
def get_path(value: Any, path: str) -> Any:
    """The value at `path` inside `value` (its first segment is a key of it)."""
    try:
        return _walk(value, _parse_path(path), "")
    except UnknownName as exc:
        raise UnknownName(f"cannot get {path!r}: {exc.message}") from None


# -- references ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ref:
    """One `${…}`: alternatives tried in order; each is a path or a literal."""

    alternatives: tuple[tuple[str, Any], ...]  # ("path", text) or ("value", literal)


_TextParts = list[str | _Ref]


def _reference_end(text: str, start: int) -> int:
    """Index just past the `}` closing the `${` at `start`; quotes may hide `}`."""
    pos, quote = start + 2, ""
    while pos < len(text):
        char = text[pos]
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "}":
            return pos + 1
        pos += 1
    raise ExpressionError(f"unterminated ${{ in {text!r}")


def _split_defaults(inner: str) -> list[str]:
    """Split `a ?? 'b' ?? c` at the `??` outside quotes."""
    parts, quote, start, pos = [], "", 0, 0
    while pos < len(inner):
        char = inner[pos]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif inner.startswith("??", pos):
            parts.append(inner[start:pos])
            start = pos = pos + 2
            continue
        pos += 1
    parts.append(inner[start:])
    return parts


def _parse_ref(inner: str) -> _Ref:
    alternatives: list[tuple[str, Any]] = []
    for raw in _split_defaults(inner):
        part = raw.strip()
        if not part:
            raise ExpressionError(f"invalid reference ${{{inner}}}: an empty alternative")
        if len(part) >= 2 and part[0] in "'\"" and part[-1] == part[0]:
            alternatives.append(("value", part[1:-1]))
        elif (literal := _literal(part)) is not _NOT_LITERAL:
            alternatives.append(("value", literal))
        else:
            _parse_path(part)  # reject a malformed path now, with its text
            alternatives.append(("path", part))
    return _Ref(tuple(alternatives))


def _parts(value: str) -> _TextParts:
    """`a ${x} b` → ["a ", _Ref(x), " b"]; `$${` stays a literal `${`."""
    parts: _TextParts = []
    buffer: list[str] = []
    pos = 0
    while pos < len(value):
        if value.startswith("$${", pos):
            buffer.append("${")
            pos += 3
        elif value.startswith("${", pos):
            end = _reference_end(value, pos)
            if buffer:
                parts.append("".join(buffer))
                buffer = []
            parts.append(_parse_ref(value[pos + 2 : end - 1]))
            pos = end
        else:
            buffer.append(value[pos])
            pos += 1
    if buffer:
        parts.append("".join(buffer))
    return parts


def _resolve_ref(ref: _Ref, scope: Scope) -> Any:
    """The first alternative that is known and not null (the last one as it is)."""
    last = len(ref.alternatives) - 1
    for number, (kind, item) in enumerate(ref.alternatives):
        if kind == "value":
            return item
        try:
            value = resolve_path(item, scope)
        except UnknownName:
            if number == last:
                raise
            continue
        if value is not None or number == last:
            return value
    raise AssertionError("a reference has at least one alternative")  # pragma: no cover


def _interpolate_text(value: str, scope: Scope, lenient: bool) -> Any:
    if "${" not in value:
        return value
    parts = _parts(value)
    if len(parts) == 1 and isinstance(parts[0], _Ref):
        try:
            return copy.deepcopy(_resolve_ref(parts[0], scope))
        except UnknownName:
            if lenient:
                return ABSENT
            raise
    pieces: list[str] = []
    for part in parts:
        if isinstance(part, str):
            pieces.append(part)
            continue
        try:
            pieces.append(text(_resolve_ref(part, scope)))
        except UnknownName:
            if not lenient:
                raise
    if sum(map(len, pieces)) > MAX_TEXT_CHARS:
        raise LimitExceeded(f"the text gives more than {MAX_TEXT_CHARS} characters")
    return "".join(pieces)


def _interpolate(value: Any, scope: Scope, lenient: bool) -> Any:
    if isinstance(value, str):
        return _interpolate_text(value, scope, lenient)
    if isinstance(value, Mapping):
        return {
            _interpolate_key(key, scope, lenient): _interpolate(item, scope, lenient)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_interpolate(item, scope, lenient) for item in value]
    return value


def _interpolate_key(key: Any, scope: Scope, lenient: bool) -> Any:
    """A map key stays a key: a reference in it is written as text."""
    return text(_interpolate_text(key, scope, lenient)) if isinstance(key, str) else key


@total
def interpolate(value: Any, scope: Scope) -> Any:
    """Resolve every `${…}` in `value` (strings, and maps and lists throughout,
    keys too); an unknown name raises `UnknownName`. Tuples come back as lists."""
    return _interpolate(value, scope, lenient=False)


@total
def interpolate_lenient(value: Any, scope: Scope) -> Any:
    """As `interpolate`, but an unknown name is `ABSENT` when it is the whole
    value and nothing inside text: a condition's target may be missing."""
    return _interpolate(value, scope, lenient=True)


def pieces(value: str, scope: Scope) -> list[tuple[str, bool]]:
    """`value`'s literal text and the text of its `${…}` values, in order, each
    marked `True` if it is a value: for a consumer that must keep them apart (a
    shell step passes values as arguments, never as script text)."""
    return [
        (part, False) if isinstance(part, str) else (text(_resolve_ref(part, scope)), True)
        for part in _parts(value)
    ]


def references(value: Any) -> list[str]:
    """The paths that `value` mentions in `${…}` (each once, in order), so a
    definition can be checked before it runs."""
    found: dict[str, None] = {}

    def visit(item: Any) -> None:
        if isinstance(item, str):
            for part in _parts(item) if "${" in item else ():
                if isinstance(part, _Ref):
                    found.update((p, None) for kind, p in part.alternatives if kind == "path")
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                visit(key)
                visit(inner)
        elif isinstance(item, list | tuple):
            for inner in item:
                visit(inner)

    visit(value)
    return list(found)


# -- text, truth, equality and order -----------------------------------------------------


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


# -- words: the pieces of `let` text and of transform arguments --------------------------


@dataclass(frozen=True)
class _Token:
    kind: str  # "word", "quoted", "op", "paren"
    value: str  # the word, the unquoted text, the operator or the parenthesis
    start: int
    end: int


_OPERATORS = frozenset(
    {"+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "??", "?", ":"}
)


def _quoted_end(source: str, start: int) -> tuple[str, int]:
    """The text of the quoted word at `start` (a backslash escapes the quote
    or itself) and the index past it."""
    quote, pos, out = source[start], start + 1, []
    while pos < len(source):
        char = source[pos]
        if char == "\\" and source[pos + 1 : pos + 2] in (quote, "\\"):
            out.append(source[pos + 1])
            pos += 2
            continue
        if char == quote:
            return "".join(out), pos + 1
        out.append(char)
        pos += 1
    raise ExpressionError(f"unterminated quote in {source!r}")


def _tokenize(source: str, *, parens: bool) -> list[_Token]:
    """Split on spaces; quoted words and `${…}` may hold spaces. With `parens`,
    `(` at the start of a word and `)` anywhere outside `${…}` stand alone."""
    tokens: list[_Token] = []
    pos = 0
    while pos < len(source):
        char = source[pos]
        if char.isspace():
            pos += 1
        elif parens and char in "()":
            tokens.append(_Token("paren", char, pos, pos + 1))
            pos += 1
        elif char in "'\"":
            value, end = _quoted_end(source, pos)
            tokens.append(_Token("quoted", value, pos, end))
            pos = end
        else:
            end = pos
            while end < len(source) and not source[end].isspace():
                if parens and source[end] == ")":
                    break
                end = _reference_end(source, end) if source.startswith("${", end) else end + 1
            word = source[pos:end]
            tokens.append(_Token("op" if word in _OPERATORS else "word", word, pos, end))
            pos = end
    return tokens


def words(source: str) -> list[str]:
    """The words of `source` as written (quotes kept), for checking arguments."""
    return [source[t.start : t.end] for t in _tokenize(source, parens=False)]


_NOT_LITERAL: Final = object()
_LITERALS: Final[dict[str, Any]] = {"true": True, "false": False, "null": None}


def _literal(word: str) -> Any:
    """A bare word that is a number, `true`, `false` or `null`, else _NOT_LITERAL."""
    if word in _LITERALS:
        return _LITERALS[word]
    number = _parse_number(word)
    return _NOT_LITERAL if number is None else number


def _token_value(token: _Token, scope: Scope) -> Any:
    if token.kind == "quoted":
        return token.value
    if "${" in token.value:
        return interpolate(token.value, scope)
    literal = _literal(token.value)
    return token.value if literal is _NOT_LITERAL else literal


def _joined(tokens: list[_Token], source: str, scope: Scope) -> Any:
    """One word's value, or several words as text with their spacing kept."""
    if len(tokens) == 1:
        return _token_value(tokens[0], scope)
    pieces = [text(_token_value(tokens[0], scope))]
    for before, token in itertools.pairwise(tokens):
        pieces.append(source[before.end : token.start])
        pieces.append(text(_token_value(token, scope)))
    return "".join(pieces)


@total
def word_value(word: str, scope: Scope) -> Any:
    """The value of one word: quoted → its text; `${x}` → typed; a number,
    `true`, `false`, `null`; otherwise the word itself."""
    return text_value(word, scope)


@total
def text_value(source: str, scope: Scope) -> Any:
    """Words without operators: one word's value, or several joined as text."""
    tokens = _tokenize(source, parens=False)
    if not tokens:
        return source.strip()
    return _joined(tokens, source, scope)


# -- the `let` parser ------------------------------------------------------------------


@dataclass(frozen=True)
class _Words:
    tokens: tuple[_Token, ...]


@dataclass(frozen=True)
class _Unary:
    operand: _Node


@dataclass(frozen=True)
class _Binary:
    op: str
    left: _Node
    right: _Node


@dataclass(frozen=True)
class _Ternary:
    test: _Node
    then: _Node
    otherwise: _Node


_Node = _Words | _Unary | _Binary | _Ternary

_COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})


class _Parser:
    """Recursive descent over the tokens, one method per precedence level."""

    def __init__(self, tokens: list[_Token], source: str) -> None:
        self.tokens = tokens
        self.source = source
        self.pos = 0
        self.depth = 0

    def nested(self, parse: Callable[[], _Node]) -> _Node:
        """`parse` one level deeper: the parser and the evaluator recurse per
        level, so the levels are bounded (chains are loops and do not count)."""
        self.depth += 1
        if self.depth > MAX_EXPRESSION_DEPTH:
            raise LimitExceeded(
                f"the expression nests more than {MAX_EXPRESSION_DEPTH} levels deep"
                " (parentheses, unary minus and '? :' count)"
            )
        try:
            return parse()
        finally:
            self.depth -= 1

    def fail(self, message: str) -> ExpressionError:
        return ExpressionError(f"{message} in {self.source!r}")

    def peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, *values: str) -> str | None:
        token = self.peek()
        if token is not None and token.kind in ("op", "paren") and token.value in values:
            self.pos += 1
            return token.value
        return None

    def parse(self) -> _Node:
        node = self.ternary()
        token = self.peek()
        if token is not None:
            if token.value == ")":
                raise self.fail("unbalanced parentheses: unexpected ')'")
            raise self.fail(f"unexpected {token.value!r}")
        return node

    def ternary(self) -> _Node:
        test = self.default()
        if not self.take("?"):
            return test
        then = self.nested(self.ternary)
        if not self.take(":"):
            raise self.fail("missing ':' of 'condition ? a : b'")
        return _Ternary(test, then, self.nested(self.ternary))

    def binary(self, ops: tuple[str, ...], operand: Callable[[], _Node]) -> _Node:
        node = operand()
        while op := self.take(*ops):
            node = _Binary(op, node, operand())
        return node

    def default(self) -> _Node:
        return self.binary(("??",), self.either)

    def either(self) -> _Node:
        return self.binary(("||",), self.both)

    def both(self) -> _Node:
        return self.binary(("&&",), self.comparison)

    def comparison(self) -> _Node:
        node = self.additive()
        if op := self.take(*_COMPARISONS):
            node = _Binary(op, node, self.additive())
            token = self.peek()
            if token is not None and token.kind == "op" and token.value in _COMPARISONS:
                raise self.fail("comparisons cannot be chained (use &&)")
        return node

    def additive(self) -> _Node:
        return self.binary(("+", "-"), self.term)

    def term(self) -> _Node:
        return self.binary(("*", "/", "%"), self.unary)

    def unary(self) -> _Node:
        if self.take("-"):
            return _Unary(self.nested(self.unary))
        return self.primary()

    def primary(self) -> _Node:
        if self.take("("):
            node = self.nested(self.ternary)
            if not self.take(")"):
                raise self.fail("unbalanced parentheses: missing ')'")
            return node
        start = self.pos
        while (token := self.peek()) is not None and token.kind in ("word", "quoted"):
            self.pos += 1
        if self.pos > start:
            return _Words(tuple(self.tokens[start : self.pos]))
        token = self.peek()
        if token is None:
            previous = self.tokens[start - 1].value if start else ""
            raise self.fail(f"missing a value after {previous!r}")
        if token.value == ")":
            if start and self.tokens[start - 1].value == "(":
                raise self.fail("empty parentheses")
            raise self.fail("unbalanced parentheses: unexpected ')'")
        if start == 0:
            raise self.fail(f"missing a value before {token.value!r}")
        raise self.fail(
            f"missing a value between {self.tokens[start - 1].value!r} and {token.value!r}"
        )


def _operand(token: _Token, scope: Scope) -> Any:
    """A single word inside an expression: durations and timestamps are typed."""
    bare = token.kind == "word" and "${" not in token.value
    if bare and _literal(token.value) is _NOT_LITERAL:
        moment = _as_instant(token.value)
        if moment is not None:
            return _Instant(moment, token.value)
        delta = _as_duration(token.value)
        if delta is not None:
            return _Duration(delta, token.value)
    return _token_value(token, scope)


class _Evaluator:
    def __init__(self, source: str, scope: Scope) -> None:
        self.source = source
        self.scope = scope

    def run(self, node: _Node) -> Any:
        if isinstance(node, _Words):
            if len(node.tokens) == 1:
                return _operand(node.tokens[0], self.scope)
            return _joined(list(node.tokens), self.source, self.scope)
        if isinstance(node, _Unary):
            return _negate(self.run(node.operand))
        if isinstance(node, _Ternary):
            return self.run(node.then if truthy(self.run(node.test)) else node.otherwise)
        return self.binary(node)

    def binary(self, node: _Binary) -> Any:
        """A chain `a op b op c …` (left-deep in the tree) folded in a loop, so
        a long chain never recurses once per operator."""
        chain: list[_Binary] = []
        leftmost: _Node = node
        while isinstance(leftmost, _Binary):
            chain.append(leftmost)
            leftmost = leftmost.left
        value, unknown = self.attempt(leftmost)
        for link in reversed(chain):
            if link.op == "??":
                if unknown is not None or value is None:
                    value, unknown = self.attempt(link.right)
                continue
            if unknown is not None:
                continue  # as if raised: up to the next `??` of the chain, or out
            try:
                value = self.combine(link, value)
            except UnknownName as exc:
                value, unknown = None, exc
        if unknown is not None:
            raise unknown
        return value

    def attempt(self, node: _Node) -> tuple[Any, UnknownName | None]:
        """The value of `node`, or the unknown name it mentions (for `??`)."""
        try:
            return self.run(node), None
        except UnknownName as exc:
            return None, exc

    def combine(self, node: _Binary, left: Any) -> Any:
        op = node.op
        if op in ("&&", "||"):
            first = truthy(left)
            if first == (op == "||"):
                return first
            return truthy(self.run(node.right))
        right = self.run(node.right)
        if op == "==":
            return loose_equals(left, right)
        if op == "!=":
            return not loose_equals(left, right)
        if op in _COMPARISONS:
            order = compare(left, right)
            if order is None:
                raise ExpressionError(f"cannot compare {_describe(left)} with {_describe(right)}")
            return {"<": order < 0, "<=": order <= 0, ">": order > 0, ">=": order >= 0}[op]
        try:
            result = _ARITHMETIC[op](left, right)
        except OverflowError:
            raise LimitExceeded(
                f"{_describe(left)} {op} {_describe(right)} is out of range"
            ) from None
        return _in_range(result, lambda: f"{_describe(left)} {op} {_describe(right)}")


def _in_range(value: Any, what: Callable[[], str]) -> Any:
    """An arithmetic result, unless it is past the bounds of numbers; `what`
    describes the operation, for the message."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > MAX_INTEGER:
        raise LimitExceeded(f"{what()} overflows: integers are limited to ±{MAX_INTEGER}")
    if isinstance(value, float) and not math.isfinite(value):
        raise LimitExceeded(f"{what()} overflows: the result is not a finite number")
    return value


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if value is ABSENT:
        return "an absent value"
    shown = text(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{_type_name(value)} {json.dumps(shown) if isinstance(value, str) else shown}"


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


def _type_error(pattern: str, left: Any, right: Any) -> ExpressionError:
    """`pattern` has `{a}` and `{b}` for the operands' descriptions."""
    hint = ""
    if any(isinstance(v, str) and re.search(r"[-+*/%]", v) for v in (left, right)):
        hint = " (operators need spaces around them)"
    message = pattern.format(a=_describe(left), b=_describe(right))
    return ExpressionError(f"cannot {message}{hint}")


def _negate(value: Any) -> Any:
    number = _numeric(value)
    if number is not None:
        return _in_range(-number, lambda: f"- {_describe(value)}")
    if isinstance(value, _Duration):
        return _Duration(-value.delta)
    raise ExpressionError(f"cannot negate {_describe(value)}")


def _add(left: Any, right: Any) -> Any:
    a, b = _real(left), _real(right)
    if a is not None and b is not None:
        return a + b
    if _is_temporal(left) or _is_temporal(right) or _timestamp_and_duration(left, right):
        moved = _shift(left, right, 1)
        if moved is None:
            moved = _shift(right, left, 1)
        if moved is not None:
            return moved
    if isinstance(left, str) or isinstance(right, str):
        first, second = text(left), text(right)
        if len(first) + len(second) > MAX_TEXT_CHARS:
            # Checked before joining: a text doubled in a loop must not reach memory.
            raise LimitExceeded(
                f"joining {_describe(left)} and {_describe(right)} gives more than"
                f" {MAX_TEXT_CHARS} characters"
            )
        return first + second
    raise _type_error("add {a} and {b}", left, right)


def _timestamp_and_duration(left: Any, right: Any) -> bool:
    """Two texts that read as a timestamp and a duration, in either order."""
    if not (isinstance(left, str) and isinstance(right, str)):
        return False
    return any(
        _as_instant(a) is not None and _as_duration(b) is not None
        for a, b in ((left, right), (right, left))
    )


def _shift(base: Any, delta: Any, sign: int) -> _Duration | _Instant | None:
    """`base ± delta` when `delta` is a duration and `base` a duration or timestamp."""
    step = _as_duration(delta)
    if step is None:
        return None
    duration = _as_duration(base)
    if duration is not None:
        return _Duration(duration + sign * step)
    moment = _as_instant(base)
    return None if moment is None else _Instant(moment + sign * step)


def _subtract(left: Any, right: Any) -> Any:
    a, b = _numeric(left), _numeric(right)
    if a is not None and b is not None:
        return a - b
    moved = _shift(left, right, -1)
    if moved is not None:
        return moved
    start, end = _as_instant(right), _as_instant(left)
    if start is not None and end is not None:
        try:
            return _Duration(end - start)
        except TypeError:
            raise ExpressionError(
                f"cannot subtract {_describe(right)} from {_describe(left)}: "
                "one has a time zone and the other not"
            ) from None
    raise _type_error("subtract {b} from {a}", left, right)


def _multiply(left: Any, right: Any) -> Any:
    a, b = _numeric(left), _numeric(right)
    if a is not None and b is not None:
        return a * b
    for duration, factor in ((left, right), (right, left)):
        delta, number = _as_duration(duration), _numeric(factor)
        if delta is not None and number is not None:
            return _Duration(delta * number)
    raise _type_error("multiply {a} by {b}", left, right)


def _quotient(a: int | float, b: int | float) -> int | float:
    """Brooklyn's division: two ints give an int when exact, else a double."""
    if b == 0:
        raise ExpressionError("division by zero")
    if isinstance(a, int) and isinstance(b, int) and a % b == 0:
        return a // b
    return a / b


def _divide(left: Any, right: Any) -> Any:
    a, b = _numeric(left), _numeric(right)
    if a is not None and b is not None:
        return _quotient(a, b)
    delta = _as_duration(left)
    if delta is not None and b is not None:
        if b == 0:
            raise ExpressionError("division by zero")
        return _Duration(delta / b)
    other = _as_duration(right)
    if delta is not None and other is not None:
        if not other:
            raise ExpressionError("division by zero")
        ratio = delta / other
        return int(ratio) if ratio.is_integer() else ratio
    raise _type_error("divide {a} by {b}", left, right)


def _modulo(left: Any, right: Any) -> Any:
    a, b = _numeric(left), _numeric(right)
    if a is None or b is None:
        raise _type_error("take the remainder of {a} divided by {b}", left, right)
    if b == 0:
        raise ExpressionError("remainder of division by zero")
    return a % b


_ARITHMETIC: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "+": _add,
    "-": _subtract,
    "*": _multiply,
    "/": _divide,
    "%": _modulo,
}


def _plain(value: Any) -> Any:
    """An expression's result as data: durations and timestamps become text."""
    if isinstance(value, _Duration | _Instant):
        return text(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError(f"the result {value} is not a finite number")
    return copy.deepcopy(value)


@total
def evaluate(source: str, scope: Scope) -> Any:
    """The value of a `let` expression (see the module's docstring)."""
    plain = _tokenize(_short(source), parens=False)
    if not any(token.kind == "op" for token in plain):
        return check_value(_plain(_joined(plain, source, scope))) if plain else source.strip()
    node = _Parser(_tokenize(source, parens=True), source).parse()
    return check_value(_plain(_Evaluator(source, scope).run(node)))


def _short(source: str) -> str:
    if len(source) > MAX_EXPRESSION_CHARS:
        raise LimitExceeded(
            f"the expression is {len(source)} characters long: the limit is {MAX_EXPRESSION_CHARS}"
        )
    return source


def check_expression(source: str) -> str | None:
    """What makes `source` too long or too deep to be a `let` expression, or
    None: the bounds a definition is checked against when it is registered.
    Other mistakes are the step's `ExpressionError` when it runs."""
    try:
        plain = _tokenize(_short(source), parens=False)
        if any(token.kind == "op" for token in plain):
            _Parser(_tokenize(source, parens=True), source).parse()
    except LimitExceeded as exc:
        return exc.message
    except ExpressionError:
        return None
    return None


def check_value(value: Any) -> Any:
    """`value`, unless it nests deeper than MAX_VALUE_DEPTH, holds more than
    MAX_VALUE_NODES items or a text longer than MAX_TEXT_CHARS. Iterative, and
    each shared object is counted wherever it appears, as JSON would write it."""
    count = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        count += 1
        if count > MAX_VALUE_NODES:
            raise LimitExceeded(f"the value holds more than {MAX_VALUE_NODES} items")
        if isinstance(item, str):
            if len(item) > MAX_TEXT_CHARS:
                raise LimitExceeded(f"a text is longer than {MAX_TEXT_CHARS} characters")
            continue
        if not isinstance(item, Mapping | list | tuple):
            continue
        if depth > MAX_VALUE_DEPTH:
            raise LimitExceeded(f"the value nests more than {MAX_VALUE_DEPTH} levels deep")
        children = item.values() if isinstance(item, Mapping) else item
        pending.extend((child, depth + 1) for child in children)
    return value


# -- types -------------------------------------------------------------------------------


class _TextTimestampLoader(yaml.SafeLoader):
    """YAML that leaves timestamps as text, so parsed values stay JSON data."""


_TextTimestampLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _parse_yaml(source: str) -> Any:
    """The last YAML document of `source` (Brooklyn discards text before `---`)."""
    try:
        documents = yamlbound.load_all(source, _TextTimestampLoader)
    except yaml.YAMLError as exc:
        raise ExpressionError(f"invalid YAML: {_first_line(str(exc))}") from None
    except yamlbound.AliasBomb as exc:
        raise LimitExceeded(f"YAML line {exc.line}: {exc.message}") from None
    except RecursionError:
        raise LimitExceeded("the YAML nests too deeply") from None
    return check_value(documents[-1]) if documents else None


def _parse_json(source: str) -> Any:
    try:
        return check_value(json.loads(source))
    except RecursionError:
        raise LimitExceeded("the JSON nests too deeply") from None
    except ValueError as exc:
        raise ExpressionError(f"invalid JSON: {exc}") from None


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else message


def _parse_structured(source: str) -> Any:
    try:
        parsed = json.loads(source)
    except ValueError:
        return _parse_yaml(source)
    return check_value(parsed)


def _cannot(value: Any, type_name: str, why: str = "") -> ExpressionError:
    return ExpressionError(f"cannot convert {_describe(value)} to {type_name}{why}")


def _to_integer(value: Any) -> int:
    number = _numeric(value)
    if isinstance(number, float) and math.isfinite(number) and number.is_integer():
        return int(number)
    if isinstance(number, int):
        return number
    raise _cannot(value, "integer")


def _to_double(value: Any) -> float:
    number = _numeric(value)
    if number is None:
        raise _cannot(value, "double")
    return float(number)


def _to_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "yes"):
            return True
        if word in ("false", "no"):
            return False
    raise _cannot(value, "boolean")


def _to_map(value: Any) -> dict[str, Any]:
    parsed = _parse_structured(value) if isinstance(value, str) else value
    if isinstance(parsed, Mapping):
        return dict(parsed)
    raise _cannot(value, "map")


def _to_list(value: Any) -> list[Any]:
    parsed = _parse_structured(value) if isinstance(value, str) else value
    if isinstance(parsed, list | tuple):
        return list(parsed)
    raise _cannot(value, "list")


_CONVERTERS: Final[dict[str, Callable[[Any], Any]]] = {
    "integer": _to_integer,
    "double": _to_double,
    "string": text,
    "boolean": _to_boolean,
    "map": _to_map,
    "list": _to_list,
    "json": lambda value: _parse_json(value) if isinstance(value, str) else value,
    "yaml": lambda value: _parse_yaml(value) if isinstance(value, str) else value,
}


@total
def coerce(type_name: str, value: Any) -> Any:
    """`value` as `type_name` (one of TYPES). Null stays null whatever the type:
    a parameter or variable may have no value."""
    converter = _CONVERTERS.get(type_name)
    if converter is None:
        raise ExpressionError(f"unknown type {type_name!r} (known: {', '.join(TYPES)})")
    if value is None:
        return None
    if value is ABSENT:
        raise _cannot(value, type_name, ": there is no value")
    try:
        return converter(value)
    except ExpressionError as exc:
        if exc.message.startswith("cannot convert"):
            raise
        error = _cannot(value, type_name, f": {exc.message}")
        # A bound that was hit stays a LimitExceeded: the cause is the size, not the text.
        raise (LimitExceeded(error.message) if isinstance(exc, LimitExceeded) else error) from None

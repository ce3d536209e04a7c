"""The operations of a `transform` step: `VALUE | op | op`, applied in turn.

An operation is its name and its arguments, words as in `let` (a quoted word
is literal; `${x}` keeps its type; numbers, `true`, `false`, `null` are
typed). `append` and `prepend` take the rest of the text as one value.
Operations never change their input: each gives a new value.

- `trim`: the text without its surrounding spaces.
- `json [parse|encode|string]`: text → its parsed JSON, other values kept;
  `parse` insists on text, `encode` writes any value as JSON, `string` writes
  anything but text as JSON. `yaml [parse|encode|string]`: the same in YAML
  (the last document of the text).
- `to_string` (or `string`), `to_upper_case`, `to_lower_case`.
- `merge [deep] [list|set|map]`: a list of maps → one map (later keys win;
  `deep` merges nested maps too), or a list of lists → one list (`set`: each
  item once). Nulls in the list are skipped.
- `first`, `last`, `min`, `max` (ordered as conditions order) of a non-empty
  list; `sum` (0 for none) and `average` (an int when exact, as `/`) of
  numbers; `size` of a text, list or map.
- `get [PATH]`: a key, an index (`get 0`, `get -1`) or a path (`get a.b[0]`);
  with none, the value itself.
- `slice FROM [TO]` of a list or text (negative counts from the end).
- `remove KEY`: a map without the key (nothing if it is missing), or a list
  without the item at that index.
- `append VALUE`, `prepend VALUE`: a list with one more item, or longer text.
- `join [SEP]`: list items as text (no separator by default); `split [SEP]`:
  a text cut at SEP (default: at runs of spaces).
- `replace [all] regex|literal PATTERN REPLACEMENT`: the first (or every)
  match replaced; a regex replacement refers to groups as `\\1`.
- `type TYPE`: converts as `let TYPE` does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

from workers.steps.expressions import (
    TYPES,
    ExpressionError,
    LimitExceeded,
    Scope,
    UnknownName,
    check_value,
    coerce,
    compare,
    get_path,
    text,
    text_value,
    total,
    word_value,
    words,
)
from workers.steps.limits import MAX_EXPRESSION_CHARS, MAX_TEXT_CHARS

__all__ = ["OPERATIONS", "apply", "validate_op"]


@dataclass(frozen=True)
class _Call:
    """One operation as written, and the scope to resolve its arguments."""

    name: str
    rest: str
    args: tuple[str, ...]
    scope: Scope

    def arg(self, index: int) -> Any:
        return word_value(self.args[index], self.scope)

    def rest_value(self) -> Any:
        return text_value(self.rest, self.scope)

    def fail(self, message: str) -> ExpressionError:
        return ExpressionError(message)


def _split(op: str) -> tuple[str, str]:
    name, _, rest = op.strip().partition(" ")
    return name.lower(), rest.strip()


@total
def apply(value: Any, ops: Sequence[str], scope: Scope) -> Any:
    """`value` passed through each operation in turn; each result is checked
    against the bounds of values (`check_value`)."""
    for op in ops:
        if len(op) > MAX_EXPRESSION_CHARS:
            raise LimitExceeded(
                f"a transform operation is {len(op)} characters long:"
                f" the limit is {MAX_EXPRESSION_CHARS}"
            )
        name, rest = _split(op)
        spec = OPERATIONS.get(name)
        if spec is None:
            raise ExpressionError(f"unknown transform {name or op!r} (known: {_known()})")
        try:
            problem = spec.check(rest)
            if problem:
                raise ExpressionError(problem)
            value = check_value(spec.run(value, _Call(name, rest, tuple(words(rest)), scope)))
        except ExpressionError as exc:
            # Keep the class: an unknown name stays an UnknownName.
            raise type(exc)(f"transform {op.strip()!r}: {exc.message}") from None
    return value


def validate_op(op: str) -> str | None:
    """What is wrong with one operation as written, or None."""
    name, rest = _split(op)
    if not name:
        return "an empty transform"
    spec = OPERATIONS.get(name)
    if spec is None:
        return f"unknown transform {name!r} (known: {_known()})"
    try:
        problem = spec.check(rest)
    except ExpressionError as exc:
        problem = exc.message
    return f"transform {name}: {problem}" if problem else None


def _known() -> str:
    return ", ".join(sorted(OPERATIONS))


# -- the operations -----------------------------------------------------------------------


def _text_of(call: _Call, value: Any) -> str:
    if not isinstance(value, str):
        raise call.fail(f"needs text, got {_kind(value)}")
    return value


def _list_of(call: _Call, value: Any, *, empty: bool = True) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise call.fail(f"needs a list, got {_kind(value)}")
    if not empty and not value:
        raise call.fail("needs a non-empty list")
    return list(value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), (str, "text"), (Mapping, "a map")):
        if isinstance(value, kind):
            return name
    if isinstance(value, list | tuple):
        return "a list"
    return "a number" if isinstance(value, int | float) else type(value).__name__


def _trim(value: Any, call: _Call) -> Any:
    return _text_of(call, value).strip()


def _json(value: Any, call: _Call) -> Any:
    mode = call.args[0] if call.args else ""
    if mode == "encode" or (mode == "string" and not isinstance(value, str)):
        return json.dumps(value, ensure_ascii=False)
    if mode == "parse":
        _text_of(call, value)
    return value if mode == "string" else coerce("json", value)


def _yaml(value: Any, call: _Call) -> Any:
    mode = call.args[0] if call.args else ""
    if mode == "encode" or (mode == "string" and not isinstance(value, str)):
        dumped = yaml.safe_dump(value, sort_keys=False, allow_unicode=True)
        return dumped.removesuffix("...\n").rstrip("\n")
    if mode == "parse":
        _text_of(call, value)
    return value if mode == "string" else coerce("yaml", value)


def _merge(value: Any, call: _Call) -> Any:
    options = set(call.args)
    items = [item for item in _list_of(call, value) if item is not None]
    wants_map = "map" in options or (
        not options & {"list", "set"} and bool(items) and all(isinstance(i, Mapping) for i in items)
    )
    if wants_map:
        merged: dict[str, Any] = {}
        for item in items:
            if not isinstance(item, Mapping):
                raise call.fail(f"cannot merge {_kind(item)} into a map")
            _merge_into(merged, item, deep="deep" in options)
        return merged
    combined: list[Any] = []
    for item in items:
        if not isinstance(item, list | tuple):
            raise call.fail(f"cannot merge {_kind(item)} into a list (give all maps or all lists)")
        combined.extend(item)
    return _unique(combined) if "set" in options else combined


def _merge_into(target: dict[str, Any], source: Mapping[str, Any], *, deep: bool) -> None:
    for key, item in source.items():
        existing = target.get(key)
        if deep and isinstance(existing, dict) and isinstance(item, Mapping):
            _merge_into(existing, item, deep=True)
        elif deep and isinstance(item, Mapping):
            target[key] = {}
            _merge_into(target[key], item, deep=True)
        else:
            target[key] = item


def _unique(items: list[Any]) -> list[Any]:
    seen: set[str] = set()
    kept = []
    for item in items:
        key = json.dumps(item, sort_keys=True, default=text)
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


def _first(value: Any, call: _Call) -> Any:
    return _list_of(call, value, empty=False)[0]


def _last(value: Any, call: _Call) -> Any:
    return _list_of(call, value, empty=False)[-1]


def _extreme(value: Any, call: _Call) -> Any:
    items = _list_of(call, value, empty=False)
    best = items[0]
    for item in items[1:]:
        order = compare(item, best)
        if order is None:
            raise call.fail(f"cannot compare {text(item)!r} with {text(best)!r}")
        if (order < 0) == (call.name == "min") and order != 0:
            best = item
    return best


def _numbers(call: _Call, value: Any, *, empty: bool) -> list[int | float]:
    numbers: list[int | float] = []
    for item in _list_of(call, value, empty=empty):
        number = coerce("double", item) if isinstance(item, str) else item
        if isinstance(number, float) and isinstance(item, str) and number.is_integer():
            number = int(number)
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise call.fail(f"needs numbers, got {text(item)!r}")
        numbers.append(number)
    return numbers


def _sum(value: Any, call: _Call) -> Any:
    return sum(_numbers(call, value, empty=True))


def _average(value: Any, call: _Call) -> Any:
    numbers = _numbers(call, value, empty=False)
    total, count = sum(numbers), len(numbers)
    if isinstance(total, int) and total % count == 0:
        return total // count
    return total / count


def _size(value: Any, call: _Call) -> Any:
    if not isinstance(value, str | list | tuple | Mapping):
        raise call.fail(f"needs text, a list or a map, got {_kind(value)}")
    return len(value)


def _get(value: Any, call: _Call) -> Any:
    if not call.args:
        return value
    key = call.arg(0)
    try:
        if isinstance(value, Mapping) and key in value:
            return value[key]
        # An index reads as a path too: `0` and `-1` step into a list.
        return get_path(value, text(key))
    except UnknownName as exc:
        raise call.fail(exc.message) from None


def _index(call: _Call, value: Any) -> int:
    number = coerce("integer", value) if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, int):
        raise call.fail(f"needs a whole number, got {text(value)!r}")
    return number


def _slice(value: Any, call: _Call) -> Any:
    if not isinstance(value, str | list | tuple):
        raise call.fail(f"needs a list or text, got {_kind(value)}")
    start = _index(call, call.arg(0))
    end = _index(call, call.arg(1)) if len(call.args) > 1 else None
    return list(value[start:end]) if not isinstance(value, str) else value[start:end]


def _remove(value: Any, call: _Call) -> Any:
    key = call.arg(0)
    if isinstance(value, Mapping):
        kept = dict(value)
        for candidate in (key, text(key)):
            kept.pop(candidate, None)
        return kept
    if isinstance(value, list | tuple):
        index = _index(call, key)
        if not -len(value) <= index < len(value):
            raise call.fail(f"index {index} is out of range (size {len(value)})")
        kept_items = list(value)
        del kept_items[index]
        return kept_items
    raise call.fail(f"needs a map or a list, got {_kind(value)}")


def _append(value: Any, call: _Call) -> Any:
    extra = call.rest_value()
    if isinstance(value, list | tuple):
        return [*value, extra] if call.name == "append" else [extra, *value]
    if isinstance(value, str):
        return value + text(extra) if call.name == "append" else text(extra) + value
    raise call.fail(f"needs a list or text, got {_kind(value)}")


def _join(value: Any, call: _Call) -> Any:
    separator = text(call.arg(0)) if call.args else ""
    return separator.join(text(item) for item in _list_of(call, value))


def _split_text(value: Any, call: _Call) -> Any:
    source = _text_of(call, value)
    if not call.args:
        return source.split()
    separator = text(call.arg(0))
    if not separator:
        raise call.fail("the separator is empty")
    return source.split(separator)


def _replace(value: Any, call: _Call) -> Any:
    source = _text_of(call, value)
    args = list(call.args)
    count = 0 if args[0] == "all" else 1
    mode = args[1] if count == 0 else args[0]
    pattern, replacement = (text(word_value(word, call.scope)) for word in args[-2:])
    if mode == "literal":
        found = source.count(pattern) if count == 0 else min(source.count(pattern), 1)
        if pattern:
            # Sized before replacing: a long replacement times many matches
            # would otherwise be built in full.
            _bounded(len(source) + found * (len(replacement) - len(pattern)))
        return source.replace(pattern, replacement, -1 if count == 0 else 1)
    try:
        return _regex_replace(re.compile(pattern), replacement, source, count)
    except (re.error, IndexError) as exc:
        raise call.fail(f"invalid pattern or replacement: {exc}") from None


def _bounded(size: int) -> None:
    if size > MAX_TEXT_CHARS:
        raise LimitExceeded(f"the result would be longer than {MAX_TEXT_CHARS} characters")


def _regex_replace(pattern: re.Pattern[str], replacement: str, source: str, count: int) -> str:
    """`re.sub`, with the result's length counted as it is built."""
    pieces: list[str] = []
    size, last = 0, 0
    for number, match in enumerate(pattern.finditer(source)):
        if count and number >= count:
            break
        piece = match.expand(replacement)
        size += match.start() - last + len(piece)
        _bounded(size)
        pieces.append(source[last : match.start()])
        pieces.append(piece)
        last = match.end()
    pieces.append(source[last:])
    _bounded(size + len(source) - last)
    return "".join(pieces)


def _to_type(value: Any, call: _Call) -> Any:
    return coerce(text(call.arg(0)), value)


# -- what each operation accepts -------------------------------------------------------------


def _count(low: int, high: int | None) -> Callable[[str], str | None]:
    """A check that an operation has between `low` and `high` words."""

    def check(rest: str) -> str | None:
        found = len(words(rest))
        if found < low:
            return f"needs {'an argument' if low == 1 else f'{low} arguments'}"
        if high is not None and found > high:
            return "takes no argument" if high == 0 else f"takes at most {high} argument(s)"
        return None

    return check


def _choice(*allowed: str, many: bool = False) -> Callable[[str], str | None]:
    """A check that the words are among `allowed` (one at most unless `many`)."""

    def check(rest: str) -> str | None:
        found = words(rest)
        if len(found) > 1 and not many:
            return f"takes one of {', '.join(allowed)}"
        wrong = [word for word in found if word not in allowed]
        return f"unknown option {wrong[0]!r} (use {', '.join(allowed)})" if wrong else None

    return check


def _check_merge(rest: str) -> str | None:
    problem = _choice("deep", "list", "set", "map", many=True)(rest)
    if problem is None and len(set(words(rest)) & {"list", "set", "map"}) > 1:
        problem = "takes one of list, set, map"
    return problem


def _check_type(rest: str) -> str | None:
    found = words(rest)
    if len(found) != 1:
        return f"needs one type ({', '.join(TYPES)})"
    if "${" not in found[0] and found[0].strip("'\"") not in TYPES:
        return f"unknown type {found[0]!r} (known: {', '.join(TYPES)})"
    return None


def _check_slice(rest: str) -> str | None:
    problem = _count(1, 2)(rest)
    if problem:
        return problem
    for word in words(rest):
        if "${" not in word and not re.fullmatch(r"-?[0-9]+", word.strip("'\"")):
            return f"needs whole numbers, got {word!r}"
    return None


def _check_replace(rest: str) -> str | None:
    found = words(rest)
    if found and found[0] == "all":
        found = found[1:]
    if len(found) != 3 or found[0] not in ("regex", "literal"):
        return "use `replace [all] regex|literal PATTERN REPLACEMENT`"
    if found[0] == "regex" and "${" not in found[1]:
        try:
            re.compile(_unquote(found[1]))
        except re.error as exc:
            return f"invalid pattern {found[1]!r}: {exc}"
    return None


def _unquote(word: str) -> str:
    if len(word) >= 2 and word[0] in "'\"" and word[-1] == word[0]:
        return word[1:-1]
    return word


@dataclass(frozen=True)
class _Spec:
    run: Callable[[Any, _Call], Any]
    check: Callable[[str], str | None]


_NONE: Final = _count(0, 0)
_ENCODINGS: Final = _choice("parse", "encode", "string")

OPERATIONS: Final[dict[str, _Spec]] = {
    "trim": _Spec(_trim, _NONE),
    "json": _Spec(_json, _ENCODINGS),
    "yaml": _Spec(_yaml, _ENCODINGS),
    "to_string": _Spec(lambda value, call: text(value), _NONE),
    "string": _Spec(lambda value, call: text(value), _NONE),
    "to_upper_case": _Spec(lambda value, call: _text_of(call, value).upper(), _NONE),
    "to_lower_case": _Spec(lambda value, call: _text_of(call, value).lower(), _NONE),
    "merge": _Spec(_merge, _check_merge),
    "first": _Spec(_first, _NONE),
    "last": _Spec(_last, _NONE),
    "min": _Spec(_extreme, _NONE),
    "max": _Spec(_extreme, _NONE),
    "sum": _Spec(_sum, _NONE),
    "average": _Spec(_average, _NONE),
    "size": _Spec(_size, _NONE),
    "get": _Spec(_get, _count(0, 1)),
    "slice": _Spec(_slice, _check_slice),
    "remove": _Spec(_remove, _count(1, 1)),
    "append": _Spec(_append, _count(1, None)),
    "prepend": _Spec(_append, _count(1, None)),
    "join": _Spec(_join, _count(0, 1)),
    "split": _Spec(_split_text, _count(0, 1)),
    "replace": _Spec(_replace, _check_replace),
    "type": _Spec(_to_type, _check_type),
}

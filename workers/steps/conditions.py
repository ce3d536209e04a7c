"""Conditions: whether a step runs, which error handler or switch case applies.

A condition is a map of checks that must all pass; a value that is not a map
(a scalar or a list) means `equals` it; no condition at all is true. The value
tested is `target` (interpolated leniently: an unknown name makes it absent,
not an error), or else the default target the caller gives (the error in
`on-error`, the switch value in `switch`), or else absent. Nested checks
(`not`, `check`, `size`, `has-element`, the items of `any` and `all`,
`assert`) are conditions too, and may set their own `target`.

Checks, with `V` the value tested:

- `equals X`: loose equality after interpolating X: numbers by value, a text
  equal to the number or boolean it spells (`"1"` equals 1, as in Brooklyn), a
  text equal to the map or list its JSON gives.
- `regex R` (the whole text form of V, DOTALL), `glob G` (case-sensitive).
- `less-than`, `greater-than`, `less-than-or-equal-to`,
  `greater-than-or-equal-to`, `in-range: [LOW, HIGH]` (inclusive): numbers and
  numeric texts, durations (`90s` < `2m`), timestamps, or texts in natural
  order; values that do not compare fail.
- `size C`: the length of a text, list or map, tested by C.
- `has-element C`: some item of a list, or value of a map, passes C.
- `not C`, `check C`, `any: [C…]`, `all: [C…]`.
- `when`: `absent`, `absent_or_null`, `present`, `present_non_null`,
  `truthy`, `falsy`, `always`, `never`.
- `assert C`: as C, but failing raises `ExpressionError("assertion failed: …")`
  instead of giving false; a presence word (`present`, …) means `when`.
  Assertions run before the other checks of their map, so a failing check
  cannot hide them.
- `error-type T`: V is an error map (`{type, message, details, step}`) whose
  type is T or matches the glob T; a map T is a nested check on the type.
- `error-field NAME`: moves the map's other checks onto a field of the error
  map V (dots reach inside: `details.code`), like `target`. With no other
  check it passes when the field is present and not null. Example:
  `{error-field: message, glob: "*disk full*"}`.

An absent V fails every check of a value (equals, regex, glob, the
comparisons, in-range, size, has-element, error-type; error-field makes the
field absent too). `when: absent` passes, and so does `not` of a failed check.
Null fails every check but `equals: null` and `when`. A map with no check, or
an unknown key, is an error, so a mistyped key never silently passes.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from workers.steps.expressions import (
    ABSENT,
    ExpressionError,
    Scope,
    UnknownName,
    compare,
    get_path,
    interpolate,
    interpolate_lenient,
    loose_equals,
    text,
    total,
    truthy,
)

__all__ = ["KEYS", "PRESENCE", "check", "validate"]

_RETARGETS: Final = ("target", "error-field")
_COMPARISONS: Final[dict[str, Callable[[int], bool]]] = {
    "less-than": lambda order: order < 0,
    "greater-than": lambda order: order > 0,
    "less-than-or-equal-to": lambda order: order <= 0,
    "greater-than-or-equal-to": lambda order: order >= 0,
}
_NESTED: Final = ("not", "check", "size", "has-element", "assert")
_LISTS: Final = ("any", "all")
_VALUES: Final = ("equals", "regex", "glob", "in-range", "error-type", *_COMPARISONS)

KEYS: Final = frozenset({*_RETARGETS, *_COMPARISONS, *_NESTED, *_LISTS, *_VALUES, "when"})

PRESENCE: Final[dict[str, Callable[[Any], bool]]] = {
    "absent": lambda value: value is ABSENT,
    "absent_or_null": lambda value: value is ABSENT or value is None,
    "present": lambda value: value is not ABSENT,
    "present_non_null": lambda value: value is not ABSENT and value is not None,
    "truthy": truthy,
    "falsy": lambda value: not truthy(value),
    "always": lambda value: True,
    "never": lambda value: False,
}


@total
def check(condition: Any, scope: Scope, default_target: Any = ABSENT) -> bool:
    """Whether `condition` holds; raises `ExpressionError` for a malformed
    condition, a failed `assert`, or a bad reference in an expected value."""
    if condition is None:
        return True
    return _Checker(scope).test(condition, default_target)


class _Checker:
    """Tests conditions against values, with `scope` for their `${…}`."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def test(self, condition: Any, value: Any) -> bool:
        if not isinstance(condition, Mapping):
            return self.equals(condition, value)
        unknown = sorted(str(key) for key in condition if key not in KEYS)
        if unknown:
            raise ExpressionError(f"unknown condition key {unknown[0]!r} in {text(condition)}")
        if "target" in condition:
            value = interpolate_lenient(condition["target"], self.scope)
        if "error-field" in condition:
            value = _field(value, self.expected(condition["error-field"]))
        checks = [key for key in condition if key not in _RETARGETS]
        if not checks:
            if "error-field" in condition:
                return value is not ABSENT and value is not None
            raise ExpressionError(
                f"condition {text(condition)} has no check (use `when: always` to always pass)"
            )
        # Assertions first: a failing check must not hide a failing assertion.
        ordered = sorted(checks, key=lambda key: key != "assert")
        return all(self.one(key, condition[key], value) for key in ordered)

    def expected(self, value: Any) -> Any:
        """An expected value, with its references resolved (unknown ones are errors)."""
        return interpolate(value, self.scope)

    def one(self, key: str, argument: Any, value: Any) -> bool:
        if key == "when":
            return _presence(self.expected(argument))(value)
        if key == "assert":
            return self.assertion(argument, value)
        if key == "not":
            return not self.test(argument, value)
        if key == "check":
            return self.test(argument, value)
        if key in _LISTS:
            items = _items(key, argument)
            combine = any if key == "any" else all
            return combine(self.test(item, value) for item in items)
        if value is ABSENT or value is None:
            return key == "equals" and value is None and self.expected(argument) is None
        return self.of_value(key, argument, value)

    def of_value(self, key: str, argument: Any, value: Any) -> bool:
        """The checks that need a value (neither absent nor null)."""
        if key == "size":
            if not isinstance(value, str | list | tuple | Mapping):
                return False
            return self.test(argument, len(value))
        if key == "has-element":
            if isinstance(value, Mapping):
                return any(self.test(argument, item) for item in value.values())
            if isinstance(value, list | tuple):
                return any(self.test(argument, item) for item in value)
            return False
        if key == "error-type":
            return self.error_type(argument, value)
        expected = self.expected(argument)
        if key == "equals":
            return loose_equals(value, expected)
        if key == "regex":
            return _pattern(expected).fullmatch(text(value)) is not None
        if key == "glob":
            return fnmatch.fnmatchcase(text(value), text(expected))
        if key == "in-range":
            low, high = _range(expected)
            return _ordered(compare(low, value), lambda o: o <= 0) and _ordered(
                compare(value, high), lambda o: o <= 0
            )
        return _ordered(compare(value, expected), _COMPARISONS[key])

    def equals(self, argument: Any, value: Any) -> bool:
        return self.one("equals", argument, value)

    def error_type(self, argument: Any, value: Any) -> bool:
        if not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
            return False
        kind = value["type"]
        if isinstance(argument, Mapping):
            return self.test(argument, kind)
        wanted = text(self.expected(argument))
        return kind == wanted or fnmatch.fnmatchcase(kind, wanted)

    def assertion(self, argument: Any, value: Any) -> bool:
        if isinstance(argument, str) and argument in PRESENCE:
            argument = {"when": argument}
        if self.test(argument, value):
            return True
        shown = "absent" if value is ABSENT else text(value)
        raise ExpressionError(f"assertion failed: {shown} does not pass {text(argument)}")


def _field(value: Any, name: Any) -> Any:
    """The field `name` of an error map, or ABSENT."""
    if not isinstance(value, Mapping):
        return ABSENT
    try:
        return get_path(value, str(name))
    except UnknownName:
        return ABSENT


def _presence(word: Any) -> Callable[[Any], bool]:
    found = PRESENCE.get(str(word)) if isinstance(word, str) else None
    if found is None:
        raise ExpressionError(f"when: unknown presence {text(word)!r} (use {', '.join(PRESENCE)})")
    return found


def _items(key: str, argument: Any) -> list[Any] | tuple[Any, ...]:
    if not isinstance(argument, list | tuple):
        raise ExpressionError(f"{key}: needs a list of conditions, got {text(argument)}")
    return argument


def _range(argument: Any) -> tuple[Any, Any]:
    if not isinstance(argument, list | tuple) or len(argument) != 2:
        raise ExpressionError(f"in-range: needs [LOW, HIGH], got {text(argument)}")
    return argument[0], argument[1]


def _pattern(argument: Any) -> re.Pattern[str]:
    try:
        return re.compile(text(argument), re.DOTALL)
    except re.error as exc:
        raise ExpressionError(f"regex: invalid pattern {text(argument)!r}: {exc}") from None


def _ordered(order: int | None, accept: Callable[[int], bool]) -> bool:
    return order is not None and accept(order)


# -- checking a condition before it runs ---------------------------------------------------


def validate(condition: Any) -> list[str]:
    """The problems of a condition as written (unknown keys, wrong shapes),
    each naming where it is, e.g. `any[1].when: unknown presence 'soon'`."""
    problems: list[str] = []
    _validate(condition, "condition", problems)
    return problems


def _validate(condition: Any, where: str, problems: list[str]) -> None:
    if not isinstance(condition, Mapping):
        return
    for key in condition:
        if key not in KEYS:
            problems.append(f"{where}: unknown key {str(key)!r}")
    if not any(key in KEYS and key not in _RETARGETS for key in condition) and (
        "error-field" not in condition
    ):
        problems.append(f"{where}: no check (use `when: always` to always pass)")
    for key, argument in condition.items():
        if key in KEYS:
            _validate_key(str(key), argument, f"{where}.{key}", problems)


def _validate_key(key: str, argument: Any, where: str, problems: list[str]) -> None:
    literal = not _dynamic(argument)
    if key in ("not", "check", "size", "has-element", "error-type") and isinstance(
        argument, Mapping
    ):
        _validate(argument, where, problems)
    elif key == "assert":
        if not (isinstance(argument, str) and argument in PRESENCE):
            _validate(argument, where, problems)
    elif key in _LISTS:
        if not isinstance(argument, list | tuple) or not argument:
            problems.append(f"{where}: needs a list of conditions")
        else:
            for number, item in enumerate(argument):
                _validate(item, f"{where}[{number}]", problems)
    elif key == "when":
        if literal and argument not in PRESENCE:
            problems.append(f"{where}: unknown presence {text(argument)!r}")
    elif key == "in-range":
        if not isinstance(argument, list | tuple) or len(argument) != 2:
            problems.append(f"{where}: needs [LOW, HIGH]")
    elif key == "regex" and literal:
        try:
            re.compile(text(argument))
        except re.error as exc:
            problems.append(f"{where}: invalid pattern: {exc}")
    elif key == "error-field" and not isinstance(argument, str):
        problems.append(f"{where}: needs a field name")
    elif key in ("glob", *_COMPARISONS) and isinstance(argument, Mapping | list | tuple):
        problems.append(f"{where}: needs a single value")


def _dynamic(argument: Any) -> bool:
    """Whether a value is only known when the condition runs."""
    return isinstance(argument, str) and "${" in argument

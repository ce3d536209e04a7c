"""`${…}` references.

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
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workers.steps.expressions.base import (
    ABSENT,
    ExpressionError,
    LimitExceeded,
    Scope,
    UnknownName,
    total,
)
from workers.steps.expressions.paths import _parse_path, resolve_path
from workers.steps.expressions.values import _NOT_LITERAL, _literal, text
from workers.steps.limits import (
    MAX_TEXT_CHARS,
)


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

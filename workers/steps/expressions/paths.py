"""Paths: `a.b[0]["k"]` read from a scope or walked through a value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from workers.steps.expressions.base import ExpressionError, Scope, UnknownName, total
from workers.steps.expressions.values import _type_name

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

"""Shorthand templates (reference brooklyn-dsl.md §2): how the words after a
step's type are read into its fields, e.g. `wait signal ${signal} [ timeout
${timeout} ]`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from workers.steps.syntax import _Invalid, _Reader, _synthetic


@dataclass(frozen=True)
class _Token:
    text: str  # quotes removed when the token is one quoted string
    start: int
    end: int
    quoted: bool


def _tokens(text: str) -> list[_Token]:
    """Words separated by spaces; a quoted string is one word, and so is a
    `{…}` group (`${a b}`, `{a, b}`)."""
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        start = pos
        close = _closing_quote(text, pos) if text[pos] in "\"'" else None
        if close is not None and (close + 1 == len(text) or text[close + 1].isspace()):
            tokens.append(_Token(_unquote(text[start : close + 1]), start, close + 1, True))
            pos = close + 1
            continue
        pos = _word_end(text, close + 1 if close is not None else pos)
        tokens.append(_Token(text[start:pos], start, pos, False))
    return tokens


def _closing_quote(text: str, start: int) -> int | None:
    quote, pos = text[start], start + 1
    while pos < len(text):
        if text[pos] == "\\" and quote == '"':
            pos += 2
            continue
        if text[pos] == quote:
            return pos
        pos += 1
    return None


def _word_end(text: str, pos: int) -> int:
    depth = 0
    while pos < len(text) and (depth or not text[pos].isspace()):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}" and depth:
            depth -= 1
        pos += 1
    return pos


def _unquote(text: str) -> str:
    inner = text[1:-1]
    if text[0] == '"':
        return re.sub(r"\\(.)", r"\1", inner)
    return inner


@dataclass(frozen=True)
class _Literal:
    word: str


@dataclass(frozen=True)
class _Var:
    name: str
    many: bool


@dataclass(frozen=True)
class _Group:
    parts: tuple[_Part, ...]
    flag: str | None


@dataclass(frozen=True)
class _Flag:
    name: str


_Part = _Literal | _Var | _Group | _Flag
_Spans = dict[str, tuple[int, int] | bool]


def _compile(template: str) -> tuple[_Part, ...]:
    """Brooklyn's template grammar: `${X}` a word, `${X...}` one or more
    words, other words literal, `[ … ]` optional, `[ ?${F} … ]` optional and
    sets F when present."""
    stack: list[list[_Part]] = [[]]
    flags: list[str | None] = []
    for word in template.split():
        if word == "[":
            stack.append([])
            flags.append(None)
        elif word == "]":
            parts = tuple(stack.pop())
            stack[-1].append(_Group(parts, flags.pop()))
        elif word.startswith("?${"):
            flags[-1] = word[3:-1]
        elif word.startswith("${"):
            name = word[2:-1]
            stack[-1].append(_Var(name.removesuffix("..."), name.endswith("...")))
        else:
            stack[-1].append(_Literal(word))
    return tuple(stack[0])


def _match(parts: tuple[_Part, ...], tokens: Sequence[_Token], pos: int) -> _Spans | None:
    """The first way the parts cover every token: optional groups are tried
    with then without, and a `...` variable takes as few words as let the rest
    match (so it stops at the next keyword)."""
    if not parts:
        return {} if pos == len(tokens) else None
    head, rest = parts[0], parts[1:]
    if isinstance(head, _Literal):
        if pos < len(tokens) and not tokens[pos].quoted and tokens[pos].text == head.word:
            return _match(rest, tokens, pos + 1)
        return None
    if isinstance(head, _Flag):
        found = _match(rest, tokens, pos)
        if found is not None:
            found[head.name] = True
        return found
    if isinstance(head, _Var):
        last = len(tokens) if head.many else min(pos + 1, len(tokens))
        for end in range(pos + 1, last + 1):
            found = _match(rest, tokens, end)
            if found is not None:
                found[head.name] = (pos, end)
                return found
        return None
    inner = head.parts + ((_Flag(head.flag),) if head.flag else ())
    found = _match(inner + rest, tokens, pos)
    return found if found is not None else _match(rest, tokens, pos)


def _template(template: str, usage: str, raw: frozenset[str] = frozenset()) -> _Reader:
    """A shorthand reader: the words after the type -> nodes by name. Names in
    `raw` keep their text exactly (quotes included)."""
    parts = _compile(template)

    def read(text: str, line: int) -> dict[str, yaml.Node]:
        tokens = _tokens(text)
        spans = _match(parts, tokens, 0)
        if spans is None:
            raise _Invalid(line, f"cannot read {text!r}: use `{usage}`")
        return {
            name: _synthetic(
                span if isinstance(span, bool) else _captured(text, tokens, span, name in raw),
                line,
            )
            for name, span in spans.items()
        }

    return read


def _captured(text: str, tokens: Sequence[_Token], span: tuple[int, int], raw: bool) -> str:
    start, end = span
    if end - start == 1 and not raw:
        return tokens[start].text
    return text[tokens[start].start : tokens[end - 1].end]

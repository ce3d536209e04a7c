"""Words: the pieces of `let` text and of transform arguments."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from workers.steps.expressions.base import ExpressionError, Scope, total
from workers.steps.expressions.references import _reference_end, interpolate
from workers.steps.expressions.values import _NOT_LITERAL, _literal, text


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

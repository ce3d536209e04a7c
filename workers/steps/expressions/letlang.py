"""The `let` language.

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
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from workers.steps.expressions.base import (
    ABSENT,
    ExpressionError,
    LimitExceeded,
    Scope,
    UnknownName,
    total,
)
from workers.steps.expressions.values import (
    _NOT_LITERAL,
    _as_duration,
    _as_instant,
    _Duration,
    _Instant,
    _is_temporal,
    _literal,
    _numeric,
    _real,
    _type_name,
    compare,
    loose_equals,
    text,
    truthy,
)
from workers.steps.expressions.words import _joined, _Token, _token_value, _tokenize
from workers.steps.limits import (
    MAX_EXPRESSION_CHARS,
    MAX_EXPRESSION_DEPTH,
    MAX_INTEGER,
    MAX_TEXT_CHARS,
    MAX_VALUE_DEPTH,
    MAX_VALUE_NODES,
)


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

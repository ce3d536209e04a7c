"""The step language is total (issue 15, findings 4 and 5): whatever an
expression, a transform or a condition meets — overflow, Python's limit on
long int texts, deep nesting, long chains, nested YAML anchors, huge ranges —
it answers a value or an `ExpressionError`, in bounded time and memory, and a
definition past the static bounds is refused when it is read."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from sdk import AsyncClient
from tests.steps.harness import run_steps
from tests.steps.scopes import DictScope
from workers.steps import conditions, transforms
from workers.steps.definition import DefinitionError, parse
from workers.steps.expressions import (
    ExpressionError,
    LimitExceeded,
    coerce,
    evaluate,
    interpolate,
)
from workers.steps.limits import (
    MAX_EXPRESSION_CHARS,
    MAX_EXPRESSION_DEPTH,
    MAX_FOREACH_ITEMS,
    MAX_INTEGER,
    MAX_TEXT_CHARS,
    MAX_VALUE_DEPTH,
    MAX_VALUE_NODES,
)

BILLION_LAUGHS = """
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def nested_parens(levels: int) -> str:
    return "1 + " + "( " * levels + "1" + " )" * levels


@pytest.mark.parametrize(
    ("source", "names", "says"),
    [
        ("5m * 1e300", {}, "out of range"),
        ("${d} * 1e300", {"d": "5m"}, "out of range"),
        ("2024-01-01T00:00:00Z + ${d}", {"d": "99999999d"}, "out of range"),
        ("1e300 * 1e300", {}, "overflows"),
        ("${big} * ${big}", {"big": 10**18}, "overflows"),
        ("${x} + 1", {"x": MAX_INTEGER}, "overflows"),
        ("- ${x}", {"x": -(2**64)}, "overflows"),
        ("1e999 + 1", {}, "not a finite number"),
        (" + ".join(["1"] * 2000), {}, ""),  # a long chain: no RecursionError
        (nested_parens(MAX_EXPRESSION_DEPTH + 1), {}, "nests more than"),
        ("1 + " + "- " * (MAX_EXPRESSION_DEPTH + 1) + "1", {}, "nests more than"),
        ("1 " + "? 1 : 1 " * (MAX_EXPRESSION_DEPTH + 1), {}, "nests more than"),
        ("1" + " + 1" * MAX_EXPRESSION_CHARS, {}, "characters long"),
        ("${s} + ${s}", {"s": "x" * (MAX_TEXT_CHARS // 2 + 1)}, "characters"),
    ],
)
def test_expressions_out_of_bounds_are_expression_errors(
    source: str, names: dict[str, Any], says: str
) -> None:
    if not says:  # within the bounds: it has a value
        assert evaluate(source, DictScope(names)) == 2000
        return
    with pytest.raises(ExpressionError, match=says):
        evaluate(source, DictScope(names))


def test_bounds_leave_ordinary_expressions_alone() -> None:
    scope = DictScope({"x": 2**62})
    assert evaluate("${x} - 1 + ${x}", scope) == MAX_INTEGER
    assert evaluate(nested_parens(MAX_EXPRESSION_DEPTH - 1), scope) == 2
    assert evaluate("5m * 2", scope) == "10m"
    # A long run of digits is text, not a number Python cannot read.
    digits = "9" * 5000
    assert evaluate(f"${{d}} == {digits[:10]}", DictScope({"d": digits})) is False
    assert conditions.check({"target": "${d}", "equals": 5}, DictScope({"d": digits})) is False


@pytest.mark.parametrize(
    ("kind", "source", "says"),
    [
        ("yaml", BILLION_LAUGHS, "expands to more than"),
        ("yaml", "a: &a [1, *a]", "contains it"),
        ("yaml", "[" * 5000 + "]" * 5000, "nests too deeply"),
        ("json", "[" * 100_000 + "]" * 100_000, "nests too deeply"),
        ("json", "[" * (MAX_VALUE_DEPTH + 1) + "]" * (MAX_VALUE_DEPTH + 1), "levels deep"),
        ("json", json.dumps(list(range(MAX_VALUE_NODES + 1))), "more than"),
        ("map", BILLION_LAUGHS, "expands to more than"),
        ("integer", "9" * 5000, "cannot convert"),
    ],
)
def test_parsing_hostile_text_is_an_expression_error(kind: str, source: str, says: str) -> None:
    started = time.monotonic()
    with pytest.raises(ExpressionError, match=says):
        coerce(kind, source)
    assert time.monotonic() - started < 5


def test_let_yaml_over_a_billion_laughs_is_an_expression_error() -> None:
    text = evaluate("${doc}", DictScope({"doc": BILLION_LAUGHS}))  # as it is: text
    with pytest.raises(LimitExceeded, match="line 7: the YAML expands to more than"):
        coerce("yaml", text)


def test_transforms_are_total() -> None:
    big = "a" * 10_000
    scope = DictScope({"r": "b" * 10_000, "deep": "[" * 5000 + "]" * 5000})
    with pytest.raises(ExpressionError, match="longer than"):
        transforms.apply(big, ["replace all literal a ${r}"], scope)
    with pytest.raises(ExpressionError, match="longer than"):
        transforms.apply(big, ["replace all regex a ${r}"], scope)
    with pytest.raises(ExpressionError, match="nests too deeply"):
        transforms.apply(scope.names["deep"], ["json parse"], scope)
    with pytest.raises(ExpressionError, match="expands to more than"):
        transforms.apply(BILLION_LAUGHS, ["yaml parse"], scope)
    assert transforms.apply("a-b-a", ["replace all regex (a) <\\1>"], scope) == "<a>-b-<a>"
    assert transforms.apply("abxd", ["replace all regex x* -"], scope) == "-a-b--d-"


def test_conditions_are_total() -> None:
    scope = DictScope({"deep": _deep(2000)})
    with pytest.raises(ExpressionError):
        conditions.check({"target": "${deep}", "equals": "x"}, scope)


def test_interpolating_a_deep_value_is_an_expression_error() -> None:
    with pytest.raises(ExpressionError, match="nests too deeply"):
        interpolate("${deep}", DictScope({"deep": _deep(5000)}))


def _deep(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


# -- definitions ------------------------------------------------------------------------


def _definition(body: str) -> str:
    return f"name: hostile\ntask_list: t\n{body}"


@pytest.mark.parametrize(
    ("body", "line", "says"),
    [
        (
            "input:\n"
            + "".join(f"  {line}\n" for line in BILLION_LAUGHS.strip().splitlines())
            + "steps:\n  - return ${i}\n",
            9,
            "expands to more than",
        ),
        ("input:\n  a: &a [1, *a]\nsteps:\n  - return ok\n", 4, "contains it"),
        (f"steps:\n  - log start\n  - let x = {nested_parens(40)}\n", 5, "nests more than 32"),
        ("steps:\n  - let x = 1" + " + 1" * 3000 + "\n", 4, "characters long"),
        (
            "steps:\n  - step: transform x = a | append " + "b" * 10_001 + "\n",
            4,
            "characters long",
        ),
    ],
)
def test_definitions_past_the_bounds_are_refused_with_their_line(
    body: str, line: int, says: str
) -> None:
    with pytest.raises(DefinitionError, match=f"^hostile.yaml:{line}: .*{says}"):
        parse(_definition(body), "hostile.yaml")


# -- in a run: each is the step's ExpressionError, which on-error handles ----------------


@pytest.mark.parametrize(
    ("step", "input", "says"),
    [
        ("let x = 5m * 1e300", {}, "out of range"),
        ("let x = ${n} * ${n} * ${n}", {"n": 10**10}, "overflows"),
        ("let integer x = ${digits}", {"digits": "9" * 5000}, "cannot convert"),
        ("let yaml x = ${doc}", {"doc": BILLION_LAUGHS}, "expands to more than"),
        ("let json x = ${doc}", {"doc": "[" * 50_000 + "]" * 50_000}, "nests too deeply"),
        ("sleep ${n}", {"n": 1e300}, "sleep"),
        ("transform x = ${doc} | yaml parse", {"doc": BILLION_LAUGHS}, "expands to more than"),
    ],
)
async def test_on_error_handles_what_used_to_escape(
    client: AsyncClient, step: str, input: dict[str, Any], says: str
) -> None:
    out = await run_steps(
        client,
        f"""
        steps:
          - step: {step}
            on-error:
              - return handled ${{error.type}} ${{error.message}}
          - return not handled
        """,
        input=input,
    )
    assert not out.failed, out.details
    assert out.result.startswith("handled ExpressionError"), out.result
    assert says in out.result


async def test_foreach_over_a_huge_range_is_lazy_and_bounded(client: AsyncClient) -> None:
    started = time.monotonic()
    out = await run_steps(
        client,
        """
        steps:
          - step: foreach i in 0..1000000000
            do:
              - log ${i}
            on-error:
              - return ${error.message}
        """,
    )
    assert out.result == (f"cannot iterate over 1000000001 items: the limit is {MAX_FOREACH_ITEMS}")
    assert time.monotonic() - started < 20
    small = await run_steps(
        client,
        """
        steps:
          - step: foreach i in 1..3
            do:
              - return ${i}
        """,
    )
    assert small.result == [1, 2, 3]

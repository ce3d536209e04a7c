"""The operations of `transform`, their arguments and their errors."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.steps.scopes import DictScope
from workers.steps.expressions import ExpressionError, UnknownName
from workers.steps.transforms import OPERATIONS, apply, validate_op

S = DictScope({"key": "b", "one": 1, "sep": ", ", "extra": {"z": 0}, "kind": "integer"})


@pytest.mark.parametrize(
    ("value", "ops", "expected"),
    [
        ("  Hello World  ", ["trim"], "Hello World"),
        ("  Hello World  ", ["trim", "to_upper_case"], "HELLO WORLD"),
        ("MiXed", ["to_lower_case"], "mixed"),
        # json and yaml
        ('{"a": [1, null]}', ["json"], {"a": [1, None]}),
        ({"a": 1}, ["json"], {"a": 1}),
        ('{"a": 1}', ["json parse"], {"a": 1}),
        ({"a": "é"}, ["json encode"], '{"a": "é"}'),
        ("text", ["json encode"], '"text"'),
        ({"a": 1}, ["json string"], '{"a": 1}'),
        ("text", ["json string"], "text"),
        ("a: 1\nb: [x, y]", ["yaml"], {"a": 1, "b": ["x", "y"]}),
        ("old: 1\n---\nnew: 2", ["yaml"], {"new": 2}),
        ([1], ["yaml"], [1]),
        ("a: 1", ["yaml parse"], {"a": 1}),
        ({"a": [1]}, ["yaml encode"], "a:\n- 1"),
        ("x", ["yaml encode"], "x"),
        ({"a": 1}, ["yaml string"], "a: 1"),
        ("a: 1", ["yaml string"], "a: 1"),
        # text
        (3, ["to_string"], "3"),
        ({"a": True}, ["string"], '{"a": true}'),
        (None, ["to_string"], "null"),
        # merge
        ([{"a": 1, "b": 1}, {"b": 2}], ["merge"], {"a": 1, "b": 2}),
        ([{"a": {"x": 1}}, {"a": {"y": 2}}], ["merge"], {"a": {"y": 2}}),
        ([{"a": {"x": 1}}, {"a": {"y": 2}}], ["merge deep"], {"a": {"x": 1, "y": 2}}),
        ([{"a": 1}, {"a": {"y": {"z": 1}}}], ["merge deep"], {"a": {"y": {"z": 1}}}),
        ([[1, 2], [2, 3]], ["merge"], [1, 2, 2, 3]),
        ([[1, 2], None, [2, 3]], ["merge set"], [1, 2, 3]),
        ([[{"a": 1}], [{"a": 1}]], ["merge set"], [{"a": 1}]),
        ([[1], (2,)], ["merge list"], [1, 2]),
        ([], ["merge"], []),
        ([], ["merge map"], {}),
        ([{"a": 1}], ["merge map deep"], {"a": 1}),
        # first, last, min, max, sum, average, size
        ([4, 5, 6], ["first"], 4),
        ((4, 5, 6), ["last"], 6),
        ([3, 1, 2], ["min"], 1),
        ([3, 1, 2], ["max"], 3),
        (["9", "10"], ["max"], "10"),
        (["90s", "2m", "1m"], ["min"], "1m"),
        (["b", "a"], ["min"], "a"),
        ([1, 1], ["max"], 1),
        ([1, 2, 3], ["sum"], 6),
        ([1, 2.5], ["sum"], 3.5),
        ([1, "2", "0.5"], ["sum"], 3.5),
        ([], ["sum"], 0),
        ([1, 2, 3], ["average"], 2),
        ([1, 2, 3, 4], ["average"], 2.5),
        ([1.0, 3.0], ["average"], 2.0),
        ("abc", ["size"], 3),
        ([1, 2], ["size"], 2),
        ({"a": 1}, ["size"], 1),
        # get
        ({"a": {"b": [5, 6]}}, ["get a.b[-1]"], 6),
        ({"a": {"b": [5, 6]}}, ["get a", "get b", "get 0"], 5),
        ({"a.b": 1}, ["get a.b"], 1),
        ({"b": 2}, ["get ${key}"], 2),
        ([7, 8], ["get ${one}"], 8),
        ([7, 8], ["get -1"], 8),
        ({"1": "one"}, ["get 1"], "one"),
        ({"x": 1}, ["get"], {"x": 1}),
        ({"a b": 1}, ['get "a b"'], 1),
        # slice
        ([1, 2, 3, 4], ["slice 1"], [2, 3, 4]),
        ([1, 2, 3, 4], ["slice 1 -1"], [2, 3]),
        ((1, 2, 3), ["slice 0 ${one}"], [1]),
        ("abcdef", ["slice -3"], "def"),
        ("abcdef", ['slice "1" 3'], "bc"),
        # remove
        ({"a": 1, "b": 2}, ["remove ${key}"], {"a": 1}),
        ({"a": 1}, ["remove missing"], {"a": 1}),
        ({"1": "x", "2": "y"}, ["remove 1"], {"2": "y"}),
        ([1, 2, 3], ["remove 0"], [2, 3]),
        ([1, 2, 3], ["remove -1"], [1, 2]),
        # append, prepend
        ([1], ["append 2"], [1, 2]),
        ([1], ['append "2"'], [1, "2"]),
        ([1], ["append hello world"], [1, "hello world"]),
        ([1], ["append ${extra}"], [1, {"z": 0}]),
        ((1,), ["prepend 0"], [0, 1]),
        ("ab", ["append c"], "abc"),
        ("ab", ["prepend ${key}"], "bab"),
        ("ab", ["append ${one}"], "ab1"),
        # join, split
        ([1, "a", None, True], ["join"], "1anulltrue"),
        (["a", "b"], ["join ${sep}"], "a, b"),
        (["a", "b"], ['join " - "'], "a - b"),
        ("a,b,,c", ["split ,"], ["a", "b", "", "c"]),
        ("  a  b ", ["split"], ["a", "b"]),
        ("a, b", ["split ${sep}"], ["a", "b"]),
        # replace
        ("a1b22", ["replace regex [0-9]+ #"], "a#b22"),
        ("a1b22", ["replace all regex [0-9]+ #"], "a#b#"),
        ("key=val", [r'replace regex "(\w+)=(\w+)" "\2=\1"'], "val=key"),
        ("a.b.c", ["replace literal . /"], "a/b.c"),
        ("a.b.c", ["replace all literal . /"], "a/b/c"),
        ("a b", ['replace literal " " ${key}'], "abb"),
        # type
        ("3", ["type integer"], 3),
        ("3", ["type ${kind}"], 3),
        ("[1]", ["type list"], [1]),
        # a pipeline
        ('  {"items": [3, 1, 2]}  ', ["trim", "json", "get items", "max", "to_string"], "3"),
        ("unchanged", [], "unchanged"),
    ],
)
def test_apply(value: Any, ops: list[str], expected: Any) -> None:
    before = copy.deepcopy(value)
    result = apply(value, ops, S)
    assert result == expected
    assert type(result) is type(expected)
    assert value == before  # operations never change their input


def test_op_names_are_case_insensitive_and_spaced_freely() -> None:
    assert apply(" x ", ["  TRIM  ", "To_Upper_Case"], S) == "X"


@pytest.mark.parametrize(
    ("value", "op", "fragment"),
    [
        ("x", "explode", "unknown transform 'explode'"),
        ("x", "trim now", "transform 'trim now': takes no argument"),
        (3, "trim", "needs text, got a number"),
        ([], "to_upper_case", "needs text, got a list"),
        (None, "to_lower_case", "needs text, got null"),
        ("{bad", "json", "cannot convert"),
        ({"a": 1}, "json parse", "needs text, got a map"),
        ("a: [", "yaml", "invalid YAML"),
        (3, "yaml parse", "needs text"),
        ("x", "json pretty", "unknown option 'pretty'"),
        ({"a": 1}, "merge", "needs a list, got a map"),
        ([{"a": 1}, [1]], "merge", "cannot merge a map into a list"),
        ([[1], {"a": 1}], "merge", "cannot merge a map into a list"),
        ([[1]], "merge map", "cannot merge a list into a map"),
        ([1], "merge list map", "takes one of list, set, map"),
        ([1], "merge sideways", "unknown option 'sideways'"),
        ([], "first", "needs a non-empty list"),
        ([], "last", "needs a non-empty list"),
        ("abc", "first", "needs a list, got text"),
        ([], "min", "needs a non-empty list"),
        ([1, "a"], "max", "cannot compare"),
        ([1, "x"], "sum", "cannot convert"),
        ([1, True], "sum", "needs numbers"),
        ([1, None], "sum", "needs numbers"),
        ([], "average", "needs a non-empty list"),
        (3, "size", "needs text, a list or a map, got a number"),
        ({"a": 1}, "get b", "cannot get 'b': the value has no key 'b'"),
        ([1], "get 3", "index 3 is out of range"),
        ("text", "get a", "the value is text"),
        ({"a": 1}, "get a b", "takes at most 1 argument"),
        ({"a": 1}, "get ${nope}", "unknown name 'nope'"),
        ([1], "slice", "needs an argument"),
        ([1], "slice a", "needs whole numbers, got 'a'"),
        ([1], "slice 1 2 3", "takes at most 2 argument"),
        ([1], "slice ${key}", "cannot convert"),
        ({"a": 1}, "slice 1", "needs a list or text, got a map"),
        ([1], "slice 0.5", "needs whole numbers"),
        ([1], "remove", "needs an argument"),
        ([1], "remove 5", "index 5 is out of range (size 1)"),
        ([1], "remove a", "cannot convert"),
        ("abc", "remove 0", "needs a map or a list, got text"),
        ({"a": 1}, "append 1", "needs a list or text, got a map"),
        ([1], "append", "needs an argument"),
        ([1], "prepend ${nope}", "unknown name 'nope'"),
        ("abc", "join", "needs a list, got text"),
        ("abc", "join a b", "takes at most 1 argument"),
        ([1], "split ,", "needs text, got a list"),
        ("abc", 'split ""', "the separator is empty"),
        ("abc", "replace regex a", "use `replace [all] regex|literal PATTERN REPLACEMENT`"),
        ("abc", "replace glob a b", "use `replace"),
        ("abc", "replace regex ( b", "invalid pattern"),
        ("abc", r"replace regex a \9", "invalid pattern or replacement"),
        (3, "replace literal a b", "needs text"),
        ("x", "type", "needs one type"),
        ("x", "type float", "unknown type 'float'"),
        ("x", "type integer", 'cannot convert text "x" to integer'),
        ("x", 'trim "unterminated', "unterminated quote"),
    ],
)
def test_apply_errors(value: Any, op: str, fragment: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        apply(value, [op], S)
    assert fragment in caught.value.message
    if not fragment.startswith("unknown transform"):
        assert caught.value.message.startswith(f"transform {op.strip()!r}: ")


def test_an_unknown_name_in_an_argument_stays_an_unknown_name() -> None:
    with pytest.raises(UnknownName):
        apply([1], ["append ${nope}"], S)


def test_validate_op() -> None:
    for op in (
        "trim",
        "json",
        "json encode",
        "yaml string",
        "merge deep set",
        "get",
        "get a.b",
        "get ${key}",
        "slice 1",
        "slice -2 ${end}",
        "remove k",
        "append two words",
        "join",
        'join ", "',
        "split",
        "replace all regex [a-z]+ X",
        "replace literal ${a} ${b}",
        "replace regex ${pattern} X",
        "type map",
        "type ${t}",
        "TRIM",
    ):
        assert validate_op(op) is None, op
    assert validate_op("") == "an empty transform"
    assert validate_op("   ") == "an empty transform"
    problem = validate_op("nope")
    assert problem is not None
    assert problem.startswith("unknown transform 'nope' (known: append, ")
    assert validate_op("size 3") == "transform size: takes no argument"
    assert validate_op("slice x") == "transform slice: needs whole numbers, got 'x'"
    assert validate_op("slice") == "transform slice: needs an argument"
    assert validate_op("type float") is not None
    assert validate_op("replace regex ( x") is not None
    assert (
        validate_op("json 'unterminated")
        == 'transform json: unterminated quote in "\'unterminated"'
    )


def test_every_operation_is_documented_in_the_module() -> None:
    import workers.steps.transforms as module

    for name in OPERATIONS:
        assert f"`{name}" in (module.__doc__ or ""), name

"""References, interpolation, the `let` language and type conversion."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.steps.scopes import DictScope
from workers.steps.expressions import (
    ABSENT,
    TYPES,
    ExpressionError,
    UnknownName,
    coerce,
    compare,
    evaluate,
    get_path,
    interpolate,
    interpolate_lenient,
    loose_equals,
    references,
    resolve_path,
    text,
    text_value,
    truthy,
    word_value,
    words,
)


def scope(**names: Any) -> DictScope:
    base: dict[str, Any] = {
        "x": 2,
        "y": 7,
        "half": 0.5,
        "s": "3",
        "word": "abc",
        "flag": True,
        "nothing": None,
        "items": [10, 20, {"k": "v"}],
        "m": {"a": {"b": [1, 2]}, "key with space": 1, "0": "zero"},
        "now": "2024-01-01T00:00:00+00:00",
        "wait": "5m",
    }
    base.update(names)
    return DictScope(base)


S = scope()


# -- paths -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("x", 2),
        ("m.a.b", [1, 2]),
        ("m.a.b[1]", 2),
        ("m.a.b.0", 1),
        ("m.a.b[-1]", 2),
        ('m["key with space"]', 1),
        ("m['a']['b'][0]", 1),
        ("m.0", "zero"),
        ("m[0]", "zero"),
        ("items[2].k", "v"),
        ("nothing", None),
    ],
)
def test_resolve_path(path: str, expected: Any) -> None:
    assert resolve_path(path, S) == expected


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("nope", "unknown name 'nope'"),
        ("nope.x", "unknown name 'nope' (in ${nope.x})"),
        ("m.a.c", "cannot resolve ${m.a.c}: m.a has no key 'c'"),
        ("items[3]", "index 3 is out of range for items (size 3)"),
        ("items.k", "items is a list"),
        ("nothing.k", "nothing is null"),
        ("word.k", "word is text"),
    ],
)
def test_resolve_path_missing_names_the_path(path: str, fragment: str) -> None:
    with pytest.raises(UnknownName) as caught:
        resolve_path(path, S)
    assert fragment in caught.value.message
    assert str(caught.value) == caught.value.message


@pytest.mark.parametrize("path", ["", ".a", "a..b", "a[", "a[]", "a['b]", "a b", "a[0]x"])
def test_resolve_path_rejects_bad_syntax(path: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        resolve_path(path, S)
    assert not isinstance(caught.value, UnknownName)
    assert "invalid reference" in caught.value.message


def test_get_path_inside_a_value() -> None:
    assert get_path({"a": [{"b": 1}]}, "a[0].b") == 1
    assert get_path([5, 6], "-1") == 6
    with pytest.raises(UnknownName) as caught:
        get_path({"a": {}}, "a.c")
    assert caught.value.message == "cannot get 'a.c': a has no key 'c'"


# -- interpolation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("${x}", 2),
        ("${m.a}", {"b": [1, 2]}),
        ("${nothing}", None),
        ("x is ${x}", "x is 2"),
        ("${x}${y}", "27"),
        ("half ${half}", "half 0.5"),
        ("null ${nothing}", "null null"),
        ("flag ${flag}", "flag true"),
        ("map ${m.a}", 'map {"b": [1, 2]}'),
        ("list ${items[0]}-${items[1]}", "list 10-20"),
        ("$${x} stays", "${x} stays"),
        ("$${x} and ${x}", "${x} and 2"),
        ("cost $5", "cost $5"),
        ("${missing ?? 'none'}", "none"),
        ("${missing ?? x}", 2),
        ("${nothing ?? 3}", 3),
        ("${missing ?? nothing}", None),
        ("${missing ?? other ?? true}", True),
        ("${missing ?? '}'}", "}"),
        ('a ${missing ?? "b c"} d', "a b c d"),
        ("no references", "no references"),
        (3, 3),
        (None, None),
        (True, True),
    ],
)
def test_interpolate(value: Any, expected: Any) -> None:
    assert interpolate(value, S) == expected


def test_interpolate_walks_collections_and_keys() -> None:
    value = {"${word}": ["${x}", ("${y}", 1)], "plain": {"n": "${s}"}, 5: "k"}
    assert interpolate(value, S) == {"abc": [2, [7, 1]], "plain": {"n": "3"}, 5: "k"}


def test_interpolate_gives_copies() -> None:
    names = {"m": {"a": [1]}}
    result = interpolate("${m}", DictScope(names))
    result["a"].append(2)
    assert names == {"m": {"a": [1]}}


def test_interpolate_unknown_name_is_an_error() -> None:
    with pytest.raises(UnknownName, match="unknown name 'nope'"):
        interpolate("value ${nope}", S)
    with pytest.raises(UnknownName):
        interpolate({"k": ["${nope}"]}, S)


@pytest.mark.parametrize("value", ["${x", "a ${m['a'}", "${}", "${x ?? }", "${a + 1}"])
def test_interpolate_malformed(value: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        interpolate(value, S)
    assert not isinstance(caught.value, UnknownName)


def test_interpolate_lenient() -> None:
    assert interpolate_lenient("${nope}", S) is ABSENT
    assert interpolate_lenient("${nope.deeper}", S) is ABSENT
    assert interpolate_lenient("a${nope}b", S) == "ab"
    assert interpolate_lenient(["${nope}", "${x}"], S) == [ABSENT, 2]
    assert interpolate_lenient("${nope ?? 1}", S) == 1
    with pytest.raises(ExpressionError):
        interpolate_lenient("${x", S)


def test_references() -> None:
    value = {"${k}": ["${a.b[0]} ${c ?? d ?? 'lit'} ${a.b[0]}", "$${not.me}", 3]}
    assert references(value) == ["k", "a.b[0]", "c", "d"]
    assert references("plain") == []
    with pytest.raises(ExpressionError):
        references("${broken")


def test_absent_is_a_falsy_singleton_kept_by_copies() -> None:
    assert not ABSENT
    assert repr(ABSENT) == "ABSENT"
    assert copy.deepcopy([ABSENT])[0] is ABSENT
    assert copy.copy(ABSENT) is ABSENT
    assert ABSENT is not None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (ABSENT, False),
        (None, False),
        (False, False),
        (0, False),
        (0.0, False),
        ("", False),
        ("  ", False),
        ("false", False),
        ("FALSE", False),
        ("No", False),
        ([], False),
        ({}, False),
        ((), False),
        (True, True),
        (1, True),
        (-0.5, True),
        ("0", True),
        ("yes", True),
        ("text", True),
        ([0], True),
        ({"a": None}, True),
    ],
)
def test_truthy(value: Any, expected: bool) -> None:
    assert truthy(value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a", "a"),
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (3, "3"),
        (2.5, "2.5"),
        ({"a": [1, "é"]}, '{"a": [1, "é"]}'),
        ((1, 2), "[1, 2]"),
        (ABSENT, ""),
    ],
)
def test_text(value: Any, expected: str) -> None:
    assert text(value) == expected


# -- equality and order -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        (1, 1.0, True),
        ("1", 1, True),
        (2.5, "2.5", True),
        ("01", 1, False),
        ("a", 1, False),
        (True, "true", True),
        ("FALSE", False, True),
        (True, 1, False),
        (True, True, True),
        (None, None, True),
        (None, "null", False),
        ({"a": 1}, '{"a": 1}', True),
        ('[1, "2"]', [1, 2], True),
        ("{bad", {"a": 1}, False),
        ({"a": [1, "2"]}, {"a": ["1", 2]}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ([1, 2], (1, 2), True),
        ([1], [1, 2], False),
        ("a", "a", True),
        (ABSENT, ABSENT, True),
        (ABSENT, None, False),
    ],
)
def test_loose_equals(left: Any, right: Any, expected: bool) -> None:
    assert loose_equals(left, right) is expected
    assert loose_equals(right, left) is expected


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        (1, 2, -1),
        (2.5, 2, 1),
        ("10", 9, 1),
        ("9", "10", -1),
        ("90s", "2m", -1),
        ("1h", "60m", 0),
        ("2024-01-02", "2024-01-01T12:00:00", 1),
        ("a9", "a10", -1),
        ("b", "a", 1),
        ("same", "same", 0),
        (True, 1, None),
        ({"a": 1}, 1, None),
        ("abc", 1, None),
        ("2024-01-01T00:00:00Z", "2024-01-01T00:00:00", None),
    ],
)
def test_compare(left: Any, right: Any, expected: int | None) -> None:
    assert compare(left, right) == expected


# -- words ---------------------------------------------------------------------------------


def test_words_and_their_values() -> None:
    assert words("a \"b c\" ${x ?? 'd e'} f") == ["a", '"b c"', "${x ?? 'd e'}", "f"]
    assert word_value("5", S) == 5
    assert word_value('"5"', S) == "5"
    assert word_value("${m.a}", S) == {"b": [1, 2]}
    assert word_value("null", S) is None
    assert word_value("5m", S) == "5m"
    assert text_value("a   ${x}  'b'", S) == "a   2  b"
    assert text_value("", S) == ""
    with pytest.raises(ExpressionError, match="unterminated quote"):
        words('a "b')


# -- the let language ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # plain text: no operator words
        ("5", 5),
        ("-5", -5),
        ("2.5", 2.5),
        ("007", "007"),
        ("true", True),
        ("false", False),
        ("null", None),
        ("${m.a}", {"b": [1, 2]}),
        ("outer", "outer"),
        ("timed out", "timed out"),
        ("matched   ${word}", "matched   abc"),
        ('"  Hello World  "', "  Hello World  "),
        ("'${x} is literal'", "${x} is literal"),
        ("${word}-${x}", "abc-2"),
        ("5m", "5m"),
        ("(not a group)", "(not a group)"),
        ("", ""),
        # arithmetic
        ("${x} + 1", 3),
        ("${x} - 5", -3),
        ("${x} * ${y}", 14),
        ("${y} / 2", 3.5),
        ("6 / 2", 3),
        ("-6 / 4", -1.5),
        ("6.0 / 2", 3.0),
        ("${y} % 3", 1),
        ("7.5 % 2", 1.5),
        ("${half} + 1", 1.5),
        ("- ${x}", -2),
        ("- - 3", 3),
        ("${s} - 1", 2),
        ("${s} * 2", 6),
        ("${s} + 1", "31"),
        ('"a" + "b"', "ab"),
        ("${word} + 1", "abc1"),
        ('"n: " + ${nothing}', "n: null"),
        ("${x} + 1 + ${s}", "33"),
        # precedence and grouping
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("10 - 4 - 3", 3),
        ("(${x} + 1)", 3),
        ("((2)) + 0", 2),
        ("2 * (3 + (4 - 1)) / 4", 3),
        ("1 + 1 == 2", True),
        ("1 < 2 && 3 < 2 || true", True),
        ("false || true && false", False),
        ("${missing} ?? 1 + 1", 2),
        ("${x} > 1 ? 1 + 1 : 0", 2),
        # durations and timestamps
        ("5m + 30s", "5m30s"),
        ("1h - 30m", "30m"),
        ("${wait} + 1m", "6m"),
        ("1m + ${wait}", "6m"),
        ("5m * 2", "10m"),
        ("2 * 90s", "3m"),
        ("1h / 4", "15m"),
        ("1h / 30m", 2),
        ("1m / 40s", 1.5),
        ("- 5m + 1s", "-4m59s"),
        ("1d + 1h + 1m + 1s + 1ms", "1d1h1m1s1ms"),
        ("30s - 30s", "0s"),
        ("${missing} ?? 90s", "90s"),
        ("${now} + 1h", "2024-01-01T01:00:00+00:00"),
        ("2024-01-01T10:00:00 - 30m", "2024-01-01T09:30:00"),
        ("1d + 2024-01-01", "2024-01-02T00:00:00"),
        ("2024-01-02 - 2024-01-01T12:00:00", "12h"),
        ("${now} + ${wait}", "2024-01-01T00:05:00+00:00"),
        ('"took " + 5m', "took 5m"),
        ("90s < 2m", True),
        ("1h == 60m", True),
        ("2024-01-02T00:00:00Z > ${now}", True),
        ('"5m" + "30s"', "5m30s"),
        ('"2024-01-01" + "x"', "2024-01-01x"),
        ("2024-01-02 > 2024-01-01", True),
        # comparisons
        ("${x} == 2", True),
        ('${x} == "2"', True),
        ("${s} == 3", True),
        ("${x} != 2", False),
        ("${flag} == true", True),
        ('${flag} == "true"', True),
        ("${nothing} == null", True),
        ("${x} < 3", True),
        ("${x} <= 2", True),
        ("${x} > 2", False),
        ("${x} >= 2", True),
        ('"a9" < "a10"', True),
        ('"9" < "10"', True),
        # boolean operators
        ("true && true", True),
        ("true && 0", False),
        ("0 || no", False),
        ("0 || ${x}", True),
        ("false && ${missing}", False),
        ("true || ${missing}", True),
        # defaults
        ("${missing} ?? 10", 10),
        ("${missing.deep} ?? 10", 10),
        ("${nothing} ?? 10", 10),
        ("${x} ?? 10", 2),
        ("${missing} + 1 ?? 0", 0),
        ("${missing} ?? ${other} ?? last", "last"),
        ("${flag} ?? 1", True),
        ("false ?? 1", False),
        ("${x ?? 5} + 1", 3),
        # ternary
        ('${y} > 5 ? "big" : "small"', "big"),
        ('${y} > 50 ? "big" : "small"', "small"),
        ("${missing} ?? 0 ? yes : no", "no"),
        ("true ? false ? 1 : 2 : 3", 2),
        ("false ? 1 : true ? 2 : 3", 2),
        ("false ? ${missing} : 4", 4),
        # juxtaposed words inside an expression are text
        ("hello world + 1", "hello world1"),
        ('x is ${x} + "."', "x is 2."),
    ],
)
def test_evaluate(source: str, expected: Any) -> None:
    result = evaluate(source, S)
    assert result == expected
    assert type(result) is type(expected)


def test_evaluate_gives_copies() -> None:
    names = {"m": {"a": [1]}}
    result = evaluate("${missing} ?? ${m}", DictScope(names))
    result["a"].append(2)
    assert names == {"m": {"a": [1]}}


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("1 +", "missing a value after '+'"),
        ("* 2", "missing a value before '*'"),
        ("1 + * 2", "missing a value between '+' and '*'"),
        ("(1 + 2", "unbalanced parentheses: missing ')'"),
        ("1 + 2 )", "unbalanced parentheses: unexpected ')'"),
        ("( ) + 1", "empty parentheses"),
        ("true ? 1", "missing ':'"),
        ("1 : 2 + 3", "unexpected ':'"),
        ("1 < 2 < 3", "cannot be chained"),
        ('"a" - 1', 'cannot subtract an integer 1 from text "a"'),
        ("${word}-1 - 1", "operators need spaces around them"),
        ("${flag} + 1", "cannot add a boolean true and an integer 1"),
        ("${m} * 2", "cannot multiply a map"),
        ("${x} / 0", "division by zero"),
        ("${half} / 0", "division by zero"),
        ("5m / 0", "division by zero"),
        ("5m / 0s", "division by zero"),
        ("${x} % 0", "remainder of division by zero"),
        ('"a" % 2', "cannot take the remainder"),
        ('"a" / 2', "cannot divide"),
        ('- "a"', "cannot negate"),
        ("${x} < abc", "cannot compare an integer 2 with text"),
        ("${flag} < 1", "cannot compare"),
        ("${now} - 2024-01-01", "time zone"),
        ("${now} < 2024-01-01", "cannot compare text"),
        ("1e308 * 10", "not a finite number"),
        ('"unterminated + 1', "unterminated quote"),
    ],
)
def test_evaluate_errors(source: str, fragment: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        evaluate(source, S)
    assert fragment in caught.value.message


def test_evaluate_unknown_name_is_unknown_name() -> None:
    with pytest.raises(UnknownName, match="nope"):
        evaluate("${nope} + 1", S)
    with pytest.raises(UnknownName, match="nope"):
        evaluate("value ${nope}", S)


# -- types -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_name", "value", "expected"),
    [
        ("integer", 3, 3),
        ("integer", 3.0, 3),
        ("integer", "42", 42),
        ("integer", " -7 ", -7),
        ("integer", "3.0", 3),
        ("integer", "1e3", 1000),
        ("double", 3, 3.0),
        ("double", 2.5, 2.5),
        ("double", "2.5", 2.5),
        ("string", "s", "s"),
        ("string", 3, "3"),
        ("string", True, "true"),
        ("string", {"a": [1]}, '{"a": [1]}'),
        ("string", [1, "b"], '[1, "b"]'),
        ("boolean", True, True),
        ("boolean", False, False),
        ("boolean", "true", True),
        ("boolean", " Yes ", True),
        ("boolean", "FALSE", False),
        ("boolean", "no", False),
        ("map", {"a": 1}, {"a": 1}),
        ("map", '{"a": 1}', {"a": 1}),
        ("map", "a: 1\nb: [x]", {"a": 1, "b": ["x"]}),
        ("map", "when: 2024-01-01", {"when": "2024-01-01"}),
        ("list", [1], [1]),
        ("list", (1, 2), [1, 2]),
        ("list", "[1, 2]", [1, 2]),
        ("list", "- a\n- b", ["a", "b"]),
        ("json", '{"a": [1, null]}', {"a": [1, None]}),
        ("json", '"text"', "text"),
        ("json", "3", 3),
        ("json", {"kept": True}, {"kept": True}),
        ("json", 5, 5),
        ("yaml", "a: 1", {"a": 1}),
        ("yaml", "ignored: 1\n---\nkept: 2", {"kept": 2}),
        ("yaml", "", None),
        ("yaml", [1], [1]),
    ],
)
def test_coerce(type_name: str, value: Any, expected: Any) -> None:
    result = coerce(type_name, value)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize("type_name", TYPES)
def test_coerce_keeps_null(type_name: str) -> None:
    assert coerce(type_name, None) is None


@pytest.mark.parametrize(
    ("type_name", "value"),
    [
        ("integer", True),
        ("integer", 2.5),
        ("integer", "2.5"),
        ("integer", "abc"),
        ("integer", "nan"),
        ("integer", float("inf")),
        ("integer", [1]),
        ("double", False),
        ("double", "1_000"),
        ("double", "inf"),
        ("double", {}),
        ("boolean", 1),
        ("boolean", "maybe"),
        ("map", [1]),
        ("map", "[1, 2]"),
        ("map", "just text"),
        ("map", "a: [unclosed"),
        ("list", {"a": 1}),
        ("list", '{"a": 1}'),
        ("list", 3),
        ("json", "{not json"),
        ("yaml", "a: [unclosed"),
        ("integer", ABSENT),
    ],
)
def test_coerce_refuses(type_name: str, value: Any) -> None:
    with pytest.raises(ExpressionError) as caught:
        coerce(type_name, value)
    assert caught.value.message.startswith("cannot convert ")
    assert f" to {type_name}" in caught.value.message


def test_coerce_unknown_type() -> None:
    with pytest.raises(ExpressionError, match="unknown type 'float'"):
        coerce("float", 1)

"""Conditions: every check, the absent-target rules, assertions and validation."""

from __future__ import annotations

from typing import Any

import pytest

from tests.steps.scopes import DictScope
from workers.steps.conditions import KEYS, check, validate
from workers.steps.expressions import ABSENT, ExpressionError, UnknownName

S = DictScope(
    {
        "n": 5,
        "s": "5",
        "name": "deploy-web-01",
        "flag": False,
        "nothing": None,
        "items": [1, 2, 3],
        "doc": {"a": 1, "b": "two"},
        "wait": "90s",
        "low": 1,
        "high": 10,
    }
)
ERROR = {"type": "ActivityTimedOut", "message": "disk full on /var", "details": {"code": 28}}


def holds(condition: Any, target: Any = ABSENT) -> bool:
    return check(condition, S, default_target=target)


def test_keys() -> None:
    assert {
        "target",
        "equals",
        "regex",
        "glob",
        "less-than",
        "greater-than",
        "less-than-or-equal-to",
        "greater-than-or-equal-to",
        "in-range",
        "size",
        "has-element",
        "not",
        "check",
        "any",
        "all",
        "when",
        "assert",
        "error-field",
        "error-type",
    } == KEYS


def test_no_condition_holds() -> None:
    assert check(None, S)


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        # target and equals
        ({"target": "${n}", "equals": 5}, True),
        ({"target": "${n}", "equals": "5"}, True),
        ({"target": "${s}", "equals": 5}, True),
        ({"target": "${n}", "equals": 5.0}, True),
        ({"target": "${n}", "equals": "${s}"}, True),
        ({"target": "${n}", "equals": 6}, False),
        ({"target": "${flag}", "equals": False}, True),
        ({"target": "${flag}", "equals": "false"}, True),
        ({"target": "${flag}", "equals": 0}, False),
        ({"target": "${nothing}", "equals": None}, True),
        ({"target": "${nothing}", "equals": "null"}, False),
        ({"target": "${doc}", "equals": {"a": 1, "b": "two"}}, True),
        ({"target": "${doc}", "equals": '{"a": 1, "b": "two"}'}, True),
        ({"target": "${items}", "equals": [1, 2, 3]}, True),
        ({"target": "n is ${n}", "equals": "n is 5"}, True),
        ({"target": "${n}", "equals": "${nope ?? 5}"}, True),
        # regex and glob, on the text form
        ({"target": "${name}", "regex": "deploy-.*-[0-9]+"}, True),
        ({"target": "${name}", "regex": "deploy"}, False),
        ({"target": "${n}", "regex": "[0-9]"}, True),
        ({"target": "a\nb", "regex": "a.b"}, True),
        ({"target": "${name}", "glob": "deploy-*"}, True),
        ({"target": "${name}", "glob": "Deploy-*"}, False),
        ({"target": "${name}", "glob": "*-0?"}, True),
        ({"target": "${flag}", "glob": "fal*"}, True),
        # comparisons
        ({"target": "${n}", "less-than": 6}, True),
        ({"target": "${n}", "less-than": 5}, False),
        ({"target": "${n}", "less-than": "10"}, True),
        ({"target": "${n}", "greater-than": 4.5}, True),
        ({"target": "${n}", "greater-than": 5}, False),
        ({"target": "${n}", "less-than-or-equal-to": 5}, True),
        ({"target": "${n}", "less-than-or-equal-to": 4}, False),
        ({"target": "${n}", "greater-than-or-equal-to": 5}, True),
        ({"target": "${n}", "greater-than-or-equal-to": 6}, False),
        ({"target": "${wait}", "less-than": "2m"}, True),
        ({"target": "${wait}", "greater-than": "1m"}, True),
        ({"target": "2024-05-01", "greater-than": "2024-04-30T23:00:00"}, True),
        ({"target": "file9", "less-than": "file10"}, True),
        ({"target": "${n}", "less-than": "abc"}, False),
        ({"target": "${flag}", "less-than": 1}, False),
        ({"target": "${doc}", "greater-than": 0}, False),
        # in-range, inclusive
        ({"target": "${n}", "in-range": [1, 10]}, True),
        ({"target": "${n}", "in-range": [5, 5]}, True),
        ({"target": "${n}", "in-range": [6, 10]}, False),
        ({"target": "${n}", "in-range": ["${low}", "${high}"]}, True),
        ({"target": "${n}", "in-range": [1, "x"]}, False),
        ({"target": "${wait}", "in-range": ["1m", "2m"]}, True),
        # size
        ({"target": "${items}", "size": 3}, True),
        ({"target": "${items}", "size": {"greater-than": 2}}, True),
        ({"target": "${doc}", "size": 2}, True),
        ({"target": "${name}", "size": {"in-range": [10, 20]}}, True),
        ({"target": "${n}", "size": 1}, False),
        ({"target": "${items}", "size": "3"}, True),
        # has-element
        ({"target": "${items}", "has-element": 2}, True),
        ({"target": "${items}", "has-element": {"greater-than": 2}}, True),
        ({"target": "${items}", "has-element": {"greater-than": 3}}, False),
        ({"target": "${doc}", "has-element": "two"}, True),
        ({"target": "${doc}", "has-element": "a"}, False),
        ({"target": "${name}", "has-element": "d"}, False),
        # not, check, any, all
        ({"target": "${n}", "not": 6}, True),
        ({"target": "${n}", "not": {"equals": 5}}, False),
        ({"target": "${n}", "not": {"not": 5}}, True),
        ({"target": "${n}", "check": 5}, True),
        ({"target": "${n}", "check": {"less-than": 3}}, False),
        ({"target": "${n}", "any": [1, 5]}, True),
        ({"target": "${n}", "any": [{"less-than": 3}, {"greater-than": 7}]}, False),
        ({"target": "${n}", "all": [{"greater-than": 3}, {"less-than": 7}]}, True),
        ({"target": "${n}", "all": [{"greater-than": 3}, {"less-than": 4}]}, False),
        ({"target": "${n}", "any": []}, False),
        ({"target": "${n}", "all": []}, True),
        # several checks must all pass
        ({"target": "${n}", "greater-than": 1, "less-than": 9, "not": 4}, True),
        ({"target": "${n}", "greater-than": 1, "less-than": 3}, False),
        # nested checks may retarget
        ({"target": "${n}", "all": [{"equals": 5}, {"target": "${s}", "equals": "5"}]}, True),
        (
            {"any": [{"target": "${nope}", "when": "present"}, {"target": "${n}", "equals": 5}]},
            True,
        ),
        # Brooklyn's hand-made lock: absent or mine
        ({"target": "${nope}", "any": [{"when": "absent"}, {"equals": "me"}]}, True),
    ],
)
def test_checks(condition: dict[str, Any], expected: bool) -> None:
    assert holds(condition) is expected


@pytest.mark.parametrize(
    ("word", "absent", "null", "false", "zero", "empty", "value"),
    [
        ("absent", True, False, False, False, False, False),
        ("absent_or_null", True, True, False, False, False, False),
        ("present", False, True, True, True, True, True),
        ("present_non_null", False, False, True, True, True, True),
        ("truthy", False, False, False, False, False, True),
        ("falsy", True, True, True, True, True, False),
        ("always", True, True, True, True, True, True),
        ("never", False, False, False, False, False, False),
    ],
)
def test_when(
    word: str, absent: bool, null: bool, false: bool, zero: bool, empty: bool, value: bool
) -> None:
    targets: tuple[Any, ...] = (ABSENT, None, False, 0, [], "x")
    results = tuple(holds({"when": word}, target) for target in targets)
    assert results == (absent, null, false, zero, empty, value)


VALUE_CHECKS: list[dict[str, Any]] = [
    {"equals": 1},
    {"equals": None},
    {"equals": ""},
    {"regex": ".*"},
    {"glob": "*"},
    {"less-than": 10},
    {"greater-than": -10},
    {"less-than-or-equal-to": 10},
    {"greater-than-or-equal-to": -10},
    {"in-range": [-10, 10]},
    {"size": 0},
    {"has-element": 1},
    {"error-type": "*"},
    {"error-field": "type"},
    {"error-field": "type", "when": "absent"},
    {"check": {"glob": "*"}},
    {"all": [{"glob": "*"}]},
    {"any": [{"glob": "*"}]},
]


@pytest.mark.parametrize("condition", VALUE_CHECKS)
def test_an_absent_target_fails_every_value_check(condition: dict[str, Any]) -> None:
    assert holds({"target": "${nope}", **condition}) is (condition.get("when") == "absent")
    assert holds(condition) is (condition.get("when") == "absent")


@pytest.mark.parametrize("condition", VALUE_CHECKS)
def test_not_of_a_failed_check_passes_when_absent(condition: dict[str, Any]) -> None:
    assert holds({"target": "${nope}", "not": condition}) is (condition.get("when") != "absent")


def test_absent_target_still_passes_presence_checks() -> None:
    assert holds({"target": "${nope}", "when": "absent"})
    assert holds({"target": "${nope.deep}", "when": "falsy"})
    assert holds({"target": "${nope}", "when": "always"})
    assert not holds({"target": "${nope}", "when": "present"})


def test_a_null_target_fails_checks_of_a_value_but_equals_null() -> None:
    for condition in ({"regex": "null"}, {"glob": "*"}, {"less-than": 1}, {"size": 0}):
        assert not holds({"target": "${nothing}", **condition})
    assert holds({"target": "${nothing}", "equals": None})
    assert holds({"target": "${nothing}", "when": "present"})


def test_scalar_condition_means_equals_the_default_target() -> None:
    assert holds("red", "red")
    assert holds(3, "3")
    assert not holds("red", "green")
    assert not holds("red")
    assert holds("${n}", 5)
    assert holds([1, 2], [1, 2])


def test_default_target_and_explicit_target() -> None:
    assert holds({"equals": 5}, 5)
    assert not holds({"equals": 5})
    # `target` replaces the default target
    assert holds({"target": "${n}", "equals": 5}, "other")


def test_assert() -> None:
    condition = {"target": "${n}", "check": "5", "assert": {"when": "present"}}
    assert holds(condition)
    assert not holds({**condition, "check": "6"})
    with pytest.raises(ExpressionError, match="assertion failed: absent"):
        holds({**condition, "target": "${nope}"})
    # assertions run first, whatever the order the map was written in
    with pytest.raises(ExpressionError, match="assertion failed"):
        holds({"target": "${nope}", "equals": 1, "assert": "present"})
    with pytest.raises(
        ExpressionError, match=r'assertion failed: 5 does not pass \{"less-than": 3\}'
    ):
        holds({"target": "${n}", "assert": {"less-than": 3}})
    assert holds({"target": "${n}", "assert": 5})


def test_error_type() -> None:
    assert holds({"error-type": "ActivityTimedOut"}, ERROR)
    assert holds({"error-type": "Activity*"}, ERROR)
    assert holds({"error-type": {"regex": ".*TimedOut"}}, ERROR)
    assert holds({"error-type": {"not": "Timeout"}}, ERROR)
    assert not holds({"error-type": "Timeout"}, ERROR)
    assert not holds({"error-type": "activitytimedout"}, ERROR)
    assert not holds({"error-type": "*"}, "not an error")
    assert not holds({"error-type": "*"}, {"message": "no type"})
    assert not holds({"target": "${err}", "error-type": "Fail"}, ERROR)  # err is unknown


def test_error_type_with_a_target() -> None:
    scope = DictScope({"err": {"type": "Fail", "message": "m"}})
    assert check({"target": "${err}", "error-type": "Fail"}, scope)


def test_error_field() -> None:
    assert holds({"error-field": "message", "glob": "*disk full*"}, ERROR)
    assert holds({"error-field": "message", "regex": ".*full.*"}, ERROR)
    assert holds({"error-field": "details.code", "equals": 28}, ERROR)
    assert holds({"error-field": "details.code", "greater-than": 20}, ERROR)
    assert not holds({"error-field": "message", "glob": "*memory*"}, ERROR)
    # alone: the field is present and not null
    assert holds({"error-field": "details"}, ERROR)
    assert not holds({"error-field": "step"}, ERROR)
    assert not holds({"error-field": "details"}, {**ERROR, "details": None})
    # a missing field, or a target that is not a map, is absent
    assert holds({"error-field": "step", "when": "absent"}, ERROR)
    assert holds({"error-field": "message", "when": "absent"}, "text")
    assert not holds({"error-field": "message", "not": {"when": "absent"}}, "text")


def test_expected_values_are_interpolated_strictly() -> None:
    with pytest.raises(UnknownName, match="nope"):
        holds({"target": "${n}", "equals": "${nope}"})
    # never reached: `all` stops at the first failing check
    assert not holds({"target": "${n}", "all": [{"equals": 1}, {"equals": "${nope}"}]})


@pytest.mark.parametrize(
    ("condition", "fragment"),
    [
        ({"target": "${n}"}, "has no check"),
        ({}, "has no check"),
        ({"target": "${n}", "equal": 5}, "unknown condition key 'equal'"),
        ({"target": "${n}", "when": "soon"}, "unknown presence 'soon'"),
        ({"target": "${n}", "any": 5}, "any: needs a list"),
        ({"target": "${n}", "all": {"equals": 5}}, "all: needs a list"),
        ({"target": "${n}", "in-range": [1]}, "in-range: needs [LOW, HIGH]"),
        ({"target": "${n}", "regex": "("}, "invalid pattern"),
        ({"target": "${n}", "not": {"target": "${n}"}}, "has no check"),
    ],
)
def test_malformed_conditions_raise(condition: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        holds(condition)
    assert fragment in caught.value.message


def test_validate_accepts_good_conditions() -> None:
    good: list[Any] = [
        None,
        "red",
        3,
        {"target": "${x}", "when": "truthy"},
        {"target": "${x}", "check": "V", "assert": {"when": "present"}},
        {"target": "${x}", "assert": "present"},
        {"error-type": "Timeout"},
        {"error-type": {"glob": "Act*"}},
        {"error-field": "message", "glob": "*x*"},
        {"error-field": "details"},
        {"size": {"greater-than": 0}},
        {"any": [{"when": "absent"}, {"equals": "${workflow.id}"}]},
        {"target": "${x}", "in-range": [1, "${max}"]},
        {"target": "${x}", "when": "${mode}"},
        {"target": "${x}", "regex": "${pattern}"},
    ]
    for condition in good:
        assert validate(condition) == [], condition


def test_validate_reports_problems_with_where_they_are() -> None:
    assert validate({"target": "${x}"}) == [
        "condition: no check (use `when: always` to always pass)"
    ]
    assert validate({"equal": 1}) == [
        "condition: unknown key 'equal'",
        "condition: no check (use `when: always` to always pass)",
    ]
    problems = validate(
        {
            "any": [{"when": "soon"}, {"regex": "("}],
            "all": 3,
            "in-range": [1, 2, 3],
            "not": {"sizes": 1},
            "error-field": 3,
            "glob": ["a"],
            "assert": {"when": "sometimes"},
        }
    )
    assert problems == [
        "condition.any[0].when: unknown presence 'soon'",
        "condition.any[1].regex: invalid pattern: missing ), unterminated subpattern at position 0",
        "condition.all: needs a list of conditions",
        "condition.in-range: needs [LOW, HIGH]",
        "condition.not: unknown key 'sizes'",
        "condition.not: no check (use `when: always` to always pass)",
        "condition.error-field: needs a field name",
        "condition.glob: needs a single value",
        "condition.assert.when: unknown presence 'sometimes'",
    ]
    assert validate({"any": []}) == ["condition.any: needs a list of conditions"]

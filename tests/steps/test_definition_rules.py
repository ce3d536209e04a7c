"""The step-workflow definition parser: the common keys, Brooklyn's parsing
rules, the workflow's own keys and STEPS.md's example."""

from __future__ import annotations

import textwrap
from datetime import timedelta
from typing import Any

import pytest

from tests.steps.definitions import (
    ACTIVITY_DEFAULTS,
    LOG_X,
    RETRY_DEFAULTS,
    definition,
    item,
    one,
    shape,
)
from workers.steps.definition import parse
from workers.steps.model import Param

# --- common keys --------------------------------------------------------------------------


def test_every_common_key() -> None:
    steps = definition(
        """
        - id: first
          name: The first ${x}
          step: activity add
          condition: {target: ${x}, equals: 1}
          input: {a: 1}
          b: 2
          output: {sum: ${output}}
          next: last_one
          timeout: 1m30s
          idempotent: yes
          replayable: from here only
          on-error:
            - retry limit 2
            - step: log failed
              condition: {error-type: Timeout}
        - id: last_one
          step: return done
        """
    ).steps
    step = steps[0]
    assert step.id == "first"
    assert step.name == "The first ${x}"
    assert step.condition == {"target": "${x}", "equals": 1}
    assert step.input == {"a": 1, "b": 2}
    assert (step.output, step.has_output) == ({"sum": "${output}"}, True)
    assert step.next == "last_one"
    assert step.timeout == timedelta(seconds=90)
    assert step.idempotent == "yes"
    assert step.replayable == "from here only"
    assert [(h.type, h.index, h.line) for h in step.on_error] == [("retry", 0, 15), ("log", 1, 16)]
    assert step.on_error[1].condition == {"error-type": "Timeout"}
    assert step.label == "first"
    # defaults
    last = steps[1]
    assert (last.name, last.condition, last.output, last.has_output) == (None, None, None, False)
    assert (last.next, last.on_error, last.timeout) == (None, (), None)
    assert (last.idempotent, last.replayable) == ("default", None)


def test_output_null_is_still_an_output() -> None:
    step = one(item("step: log x\noutput: null"))
    assert (step.output, step.has_output) == (None, True)


def test_on_error_may_be_a_single_step() -> None:
    step = one(item("step: log x\non-error: retry limit 1"))
    assert shape(step.on_error) == (("retry", {**RETRY_DEFAULTS, "limit": ("1",)}),)


@pytest.mark.parametrize(
    ("written", "stored"),
    [
        ("yes", "yes"),
        ("true", "yes"),
        ("'True'", "yes"),
        ("no", "no"),
        ("false", "no"),
        ("default", "default"),
    ],
)
def test_idempotent_words(written: str, stored: str) -> None:
    assert one(item(f"step: log x\nidempotent: {written}")).idempotent == stored


@pytest.mark.parametrize(
    ("kind", "written", "stored"),
    [
        ("log x", "from here", "from here"),
        ("log x", "From  Here only", "from here only"),
        ("log x", "reset", "reset"),
        ("workflow", "disabled", "disabled"),
        ("workflow", "from start", "from start"),
        ("workflow", "automatically", "automatically"),
        ("workflow", "from here", "from here"),
    ],
)
def test_replayable_words(kind: str, written: str, stored: str) -> None:
    steps = "\nsteps: [log x]" if kind == "workflow" else ""
    assert one(item(f"step: {kind}\nreplayable: {written}{steps}")).replayable == stored


# --- Brooklyn's parsing rules -------------------------------------------------------------


def test_a_key_with_a_space_is_yaml_splitting_a_shorthand() -> None:
    steps = definition(
        """
        - log Your name is: ${name}
        - log at: 10:30
        - return the answer: "42"
        """
    ).steps
    assert steps[0].args == {"message": "Your name is: ${name}", "level": "info"}
    assert steps[1].args == {"message": "at: 10:30", "level": "info"}  # text as written
    assert steps[2].args == {"value": 'the answer: "42"'}
    assert [s.line for s in steps] == [3, 4, 5]


def test_an_inline_list_is_a_subworkflow() -> None:
    steps = definition(
        """
        - log x
        - - log x
          - id: inner
            step: log x
        """
    ).steps
    block = steps[1]
    assert (block.type, block.index, block.line) == ("subworkflow", 1, 4)
    assert shape(block.args) == {"steps": (LOG_X, LOG_X)}
    inner = block.args["steps"]
    assert [(s.index, s.line, s.id) for s in inner] == [(0, 4, None), (1, 5, "inner")]


def test_a_step_map_under_step_is_the_step() -> None:
    step = one("- step: {type: log, message: x}")
    assert shape(step) == LOG_X


def test_indexes_count_within_each_list() -> None:
    steps = definition(
        """
        - log x
        - type: workflow
          steps:
            - log x
            - step: if ${x}
              then: [log x, log x]
        """
    ).steps
    nested = steps[1].args["steps"]
    assert [s.index for s in steps] == [0, 1]
    assert [s.index for s in nested] == [0, 1]
    assert [s.index for s in nested[1].args["then"]] == [0, 1]
    assert [s.line for s in nested] == [6, 7]


def test_expressions_inside_flow_collections_are_text() -> None:
    step = one(item("step: log x\ninput: {a: ${x}, b: [${y}, 'q ${z}'], c: {d: ${w.v}}}"))
    assert step.input == {"a": "${x}", "b": ["${y}", "q ${z}"], "c": {"d": "${w.v}"}}


def test_timestamps_stay_text() -> None:
    step = one(item("step: log x\ninput: {day: 2024-01-02}"))
    assert step.input == {"day": "2024-01-02"}


def test_goto_may_name_a_nested_id_or_a_later_one() -> None:
    steps = definition(
        """
        - goto later
        - step: if ${x}
          then:
            - id: deep
              step: log x
        - id: later
          step: goto deep
        """
    ).steps
    assert [s.type for s in steps] == ["goto", "if", "goto"]


# --- the workflow -------------------------------------------------------------------------


def test_workflow_keys() -> None:
    text = textwrap.dedent(
        """\
        name: orders
        version: 2.10
        task-list: decisions
        description: Takes orders
        parameters:
          size: {type: string, default: small, description: how big}
          count: {type: integer, default: 2}
          owner: {type: string, required: true}
          plain: 7
          anything:
        input: {region: eu}
        output: ${total}
        on-error: retry limit 2 in 5m
        timeout: 1h
        execution-timeout: 2h
        decider_timeout: 20s
        lock: {name: quota, scope: ${input.owner}}
        replayable: automatically
        idempotent: none
        retention: 5
        steps:
          - return done
        """
    )
    loaded = parse(text, "orders.yaml")
    assert (loaded.name, loaded.version, loaded.task_list) == ("orders", "2.10", "decisions")
    assert loaded.description == "Takes orders"
    assert loaded.parameters == (
        Param("size", "string", "small", True, False),
        Param("count", "integer", 2, True, False),
        Param("owner", "string", None, False, True),
        Param("plain", "", 7, True, False),
        Param("anything"),
    )
    assert loaded.input == {"region": "eu"}
    assert (loaded.output, loaded.has_output) == ("${total}", True)
    assert shape(loaded.on_error) == (("retry", {**RETRY_DEFAULTS, "limit": ("2 in 5m",)}),)
    assert loaded.timeout == timedelta(hours=1)
    assert loaded.execution_timeout == timedelta(hours=2)
    assert loaded.decider_timeout == timedelta(seconds=20)
    assert loaded.lock == {"name": "quota", "scope": "${input.owner}"}
    assert (loaded.replayable, loaded.idempotent, loaded.retention) == ("automatically", "", "5")
    assert (loaded.source, loaded.path) == (text, "orders.yaml")


def test_workflow_defaults() -> None:
    loaded = parse("name: w\nsteps: [return x]\n")
    assert (loaded.version, loaded.task_list, loaded.description) == ("1", "default", "")
    assert (loaded.parameters, loaded.input, loaded.on_error) == ((), {}, ())
    assert (loaded.output, loaded.has_output, loaded.lock) == (None, False, None)
    assert (loaded.timeout, loaded.execution_timeout, loaded.decider_timeout) == (None,) * 3
    assert (loaded.replayable, loaded.idempotent, loaded.retention) == ("enabled", "", None)
    assert loaded.path == "<definition>"


@pytest.mark.parametrize(
    ("key", "value"),
    [("task_list", "a"), ("execution_timeout", "1m"), ("decider-timeout", "1m")],
)
def test_workflow_key_spellings(key: str, value: str) -> None:
    parse(f"name: w\n{key}: {value}\nsteps: [return x]\n")


def test_idempotent_all() -> None:
    assert parse("name: w\nidempotent: all\nsteps: [return x]\n").idempotent == "all"


@pytest.mark.parametrize(
    ("param", "default"),
    [
        ("{type: string, default: 5}", 5),
        ("{type: integer, default: '7'}", "7"),
        ("{type: double, default: 1.5}", 1.5),
        ("{type: boolean, default: false}", False),
        ("{type: map, default: {a: 1}}", {"a": 1}),
        ("{type: list, default: [1]}", [1]),
        ("{type: json, default: [1, {a: 2}]}", [1, {"a": 2}]),
        ("{type: integer, default: null}", None),
    ],
)
def test_parameter_defaults_that_fit(param: str, default: Any) -> None:
    loaded = parse(f"name: w\nparameters:\n  p: {param}\nsteps: [return x]\n")
    assert loaded.parameters[0].default == default


# --- STEPS.md's example -------------------------------------------------------------------

STEPS_MD_EXAMPLE = """\
name: provision-vm                 # workflow type; `version` optional (default "1")
version: "1"
task_list: provisioning            # decision task list (default: "default")
parameters:                        # typed, with defaults; merged into `input`
  size: {type: string, default: small}
  owner: {type: string, required: true}
lock: quota-${input.owner}         # or {name: quota, scope: ...}; see Locks
timeout: 1h                        # starts once the lock is held
replayable: from start             # enabled | disabled | from start | automatically
idempotent: all                    # optional
retention: max(24h, 5)
on-error:
  - retry limit 2 in 5m
steps:
  - let request_id = ${workflow.id}-${input.size}
  - step: activity request-approval
    input: {owner: ${input.owner}}
    task_list: approvals
    timeout: 30s
  - id: wait_for_approval
    step: wait signal approved timeout 7d
  - step: fail message Request denied by ${output.by}
    condition: {target: ${output.approved}, not: {equals: true}}
  - workflow replayable from here
  - step: http https://cloud.example/provision
    input: {method: POST, body: {size: ${input.size}}}
    idempotent: no
  - return ${output.content_json.vm_id}
"""


def test_the_steps_md_example() -> None:
    loaded = parse(STEPS_MD_EXAMPLE, "provision-vm.yaml")
    assert (loaded.name, loaded.version, loaded.task_list) == ("provision-vm", "1", "provisioning")
    assert loaded.parameters == (
        Param("size", "string", "small", True, False),
        Param("owner", "string", None, False, True),
    )
    assert loaded.lock == "quota-${input.owner}"
    assert loaded.timeout == timedelta(hours=1)
    assert (loaded.replayable, loaded.idempotent, loaded.retention) == (
        "from start",
        "all",
        "max(24h, 5)",
    )
    assert [(h.type, h.line, h.args["limit"]) for h in loaded.on_error] == [
        ("retry", 13, ("2 in 5m",))
    ]
    let, activity, wait, fail, setting, http, done = loaded.steps
    assert [s.line for s in loaded.steps] == [15, 16, 20, 22, 24, 25, 28]
    assert [s.index for s in loaded.steps] == list(range(7))
    assert let.args == {
        "var_type": None,
        "name": "request_id",
        "value": "${workflow.id}-${input.size}",
        "expression": True,
    }
    assert activity.args == {
        **ACTIVITY_DEFAULTS,
        "activity_type": "request-approval",
        "task_list": "approvals",
    }
    assert activity.input == {"owner": "${input.owner}"}
    assert activity.timeout == timedelta(seconds=30)
    assert (wait.id, wait.args) == ("wait_for_approval", {"signal": "approved", "timeout": "7d"})
    assert fail.args == {
        "rethrow": False,
        "message": "Request denied by ${output.by}",
        "value": None,
    }
    assert fail.condition == {"target": "${output.approved}", "not": {"equals": True}}
    assert (setting.args["setting"], setting.args["replayable"]) == ("replayable", "from here")
    assert http.args == {"url": "https://cloud.example/provision", "task_list": None}
    assert http.input == {"method": "POST", "body": {"size": "${input.size}"}}
    assert http.idempotent == "no"
    assert done.args == {"value": "${output.content_json.vm_id}"}

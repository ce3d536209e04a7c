"""The step-workflow definition parser (workers/steps/definition.py): every
step type's shorthand and long form, the common keys, Brooklyn's parsing
rules, and every refusal with its line and reason."""

from __future__ import annotations

import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from workers.steps.definition import DefinitionError, load_dir, load_file, parse
from workers.steps.model import Definition, Param, Step


def definition(steps: str, head: str = "name: wf\n") -> Definition:
    """A definition of `head` then `steps:` with the given (dedented) steps,
    which start on line `head lines + 2`."""
    body = textwrap.indent(textwrap.dedent(steps).strip("\n"), "  ")
    return parse(f"{head}steps:\n{body}\n")


def one(step: str) -> Step:
    """The only step of a definition (on line 3)."""
    steps = definition(step).steps
    assert len(steps) == 1
    return steps[0]


def item(step_map: str) -> str:
    """A step map as a YAML list item."""
    lines = textwrap.dedent(step_map).strip("\n").splitlines()
    return "\n".join(["- " + lines[0], *("  " + line for line in lines[1:])])


def shape(value: Any) -> Any:
    """Nested steps as (type, args) so whole trees compare in one assert."""
    if isinstance(value, Step):
        return (value.type, shape(value.args))
    if isinstance(value, tuple):
        return tuple(shape(v) for v in value)
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    return value


def refused(text: str | bytes, tmp_path: Path | None = None) -> str:
    with pytest.raises(DefinitionError) as caught:
        if isinstance(text, bytes):
            assert tmp_path is not None
            path = tmp_path / "bad.yaml"
            path.write_bytes(text)
            load_file(path)
        else:
            parse(text, "wf.yaml")
    return str(caught.value)


LOG_X = ("log", {"message": "x", "level": "info"})
NO_FAN_OUT = {"concurrency": 1, "reducing": None}
NESTED_DEFAULTS = {
    "target": None,
    "has_target": False,
    **NO_FAN_OUT,
    "lock": None,
    "replayable": None,
    "retention": None,
    "setting": None,
    "var": "target",
    "index_var": "target_index",
}
ACTIVITY_DEFAULTS = {
    "version": "",
    "task_list": None,
    "schedule_to_start": None,
    "start_to_close": None,
    "schedule_to_close": None,
    "heartbeat": None,
}
RETRY_DEFAULTS = {
    "replay": None,
    "from": None,
    "limit": (),
    "backoff": None,
    "timeout": None,
    "hash": None,
}

# --- shorthand ----------------------------------------------------------------------------

SHORTHAND: dict[str, tuple[str, str, dict[str, Any]]] = {
    "let": (
        "let x = 1",
        "let",
        {"var_type": None, "name": "x", "value": "1", "expression": True},
    ),
    "let-typed-expression": (
        "let integer x = ${y} * 2",
        "let",
        {"var_type": "integer", "name": "x", "value": "${y} * 2", "expression": True},
    ),
    "let-keeps-quotes": (
        'let m.inner = "a  b" ?? c',
        "let",
        {"var_type": None, "name": "m.inner", "value": '"a  b" ?? c', "expression": True},
    ),
    "let-output": (
        "let output = ${a} = ${b}",
        "let",
        {"var_type": None, "name": "output", "value": "${a} = ${b}", "expression": True},
    ),
    "transform": (
        "transform t = ${raw} | trim | to_upper_case",
        "transform",
        {"var_type": None, "name": "t", "value": "${raw}", "ops": ("trim", "to_upper_case")},
    ),
    "transform-typed-quoted": (
        'transform string t = " a | b " | trim',
        "transform",
        {"var_type": "string", "name": "t", "value": " a | b ", "ops": ("trim",)},
    ),
    "transform-value": (
        "transform value ${x} | trim",
        "transform",
        {"var_type": None, "name": None, "value": "${x}", "ops": ("trim",)},
    ),
    "transform-variable": (
        "transform variable x | trim | to_lower_case",
        "transform",
        {"var_type": None, "name": "x", "value": "${x}", "ops": ("trim", "to_lower_case")},
    ),
    "log": ("log hello ${name}", "log", {"message": "hello ${name}", "level": "info"}),
    "log-quoted-whole": ('log "a  b"', "log", {"message": "a  b", "level": "info"}),
    "log-quotes-kept-inside": (
        'log say "hi" now',
        "log",
        {"message": 'say "hi" now', "level": "info"},
    ),
    "sleep": ("sleep 5s", "sleep", {"duration": "5s"}),
    "sleep-expression": ("sleep ${delay}", "sleep", {"duration": "${delay}"}),
    "wait": ("wait signal approved", "wait", {"signal": "approved", "timeout": None}),
    "wait-timeout": (
        "wait signal approved timeout 7d",
        "wait",
        {"signal": "approved", "timeout": "7d"},
    ),
    "goto": ("goto end", "goto", {"target": "end"}),
    "goto-expression": ("goto ${where}", "goto", {"target": "${where}"}),
    "no-op": ("no-op", "no-op", {}),
    "return": ("return ${output.x}", "return", {"value": "${output.x}"}),
    "return-text": ("return not here", "return", {"value": "not here"}),
    "return-nothing": ("return", "return", {"value": None}),
    "fail": ("fail", "fail", {"rethrow": False, "message": None, "value": None}),
    "fail-rethrow": ("fail rethrow", "fail", {"rethrow": True, "message": None, "value": None}),
    "fail-message": (
        "fail message Request denied by ${who}",
        "fail",
        {"rethrow": False, "message": "Request denied by ${who}", "value": None},
    ),
    "fail-rethrow-message": (
        "fail rethrow message again",
        "fail",
        {"rethrow": True, "message": "again", "value": None},
    ),
    "retry": ("retry", "retry", RETRY_DEFAULTS),
    "retry-limit-in": ("retry limit 2 in 5m", "retry", {**RETRY_DEFAULTS, "limit": ("2 in 5m",)}),
    "retry-everything": (
        "retry replay from start limit 3 backoff 1s 2s increasing 3x up to 1m jitter 10%"
        " timeout 1h hash shared",
        "retry",
        {
            "replay": True,
            "from": "start",
            "limit": ("3",),
            "backoff": "1s 2s increasing 3x up to 1m jitter 10%",
            "timeout": "1h",
            "hash": "shared",
        },
    ),
    "retry-from-limit-backoff": (
        "retry from last limit 7d backoff 10s increasing 2x",
        "retry",
        {**RETRY_DEFAULTS, "from": "last", "limit": ("7d",), "backoff": "10s increasing 2x"},
    ),
    "if": (
        "if ${x} then log x",
        "if",
        {"test": {"target": "${x}", "when": "truthy"}, "then": (LOG_X,), "else": ()},
    ),
    "if-equals": (
        "if ${x} == five things then return ${x}",
        "if",
        {
            "test": {"target": "${x}", "check": "five things", "assert": {"when": "present"}},
            "then": (("return", {"value": "${x}"}),),
            "else": (),
        },
    ),
    "foreach": (
        "foreach n in ${items} do log x",
        "foreach",
        {
            "var": "n",
            "items": "${items}",
            "do": (LOG_X,),
            **NO_FAN_OUT,
            "index_var": "target_index",
        },
    ),
    "foreach-spread-range": (
        "foreach {a, b} in 1..4 do log x",
        "foreach",
        {
            "var": "{a, b}",
            "items": "1..4",
            "do": (LOG_X,),
            **NO_FAN_OUT,
            "index_var": "target_index",
        },
    ),
    "workflow-replayable": (
        "workflow replayable from here",
        "workflow",
        {**NESTED_DEFAULTS, "steps": (), "replayable": "from here", "setting": "replayable"},
    ),
    "workflow-retention": (
        "workflow retention max(2, 1h)",
        "workflow",
        {**NESTED_DEFAULTS, "steps": (), "retention": "max(2, 1h)", "setting": "retention"},
    ),
    "activity": (
        "activity charge-card",
        "activity",
        {"activity_type": "charge-card", **ACTIVITY_DEFAULTS},
    ),
    "http": (
        "http https://example.com/x?a=1",
        "http",
        {"url": "https://example.com/x?a=1", "task_list": None},
    ),
    "shell": (
        'shell echo "hello world" > out.txt',
        "shell",
        {"command": 'echo "hello world" > out.txt', "task_list": None},
    ),
    "signal": (
        "signal ${other} approved",
        "signal",
        {"workflow_id": "${other}", "name": "approved", "value": None},
    ),
    "signal-value": (
        "signal wf-1 approved = yes please",
        "signal",
        {"workflow_id": "wf-1", "name": "approved", "value": "yes please"},
    ),
    "child": (
        "child billing",
        "child",
        {"workflow_type": "billing", "version": "", "task_list": None},
    ),
}


@pytest.mark.parametrize("case", list(SHORTHAND), ids=list(SHORTHAND))
def test_shorthand(case: str) -> None:
    text, kind, args = SHORTHAND[case]
    for written in (f"- {text}", f"- step: {text}", f"- s: {text}", f"- shorthand: {text}"):
        step = one(written)
        assert (step.type, shape(step.args)) == (kind, args), written
        assert (step.line, step.index, step.input) == (3, 0, {})


def test_label_sets_the_id() -> None:
    steps = definition("- label loop\n- goto loop").steps
    assert (steps[0].type, steps[0].args, steps[0].id) == ("label", {}, "loop")
    assert steps[1].args == {"target": "loop"}


# --- long form ----------------------------------------------------------------------------

LONG_FORM: dict[str, tuple[str, str, dict[str, Any]]] = {
    "let-value": (
        "type: let\nvariable: x\nvalue: 5",
        "let",
        {"var_type": None, "name": "x", "value": 5, "expression": False},
    ),
    "let-typed-text": (
        "type: let\nvariable: {name: x, type: integer}\nvalue: ${y} + 1",
        "let",
        {"var_type": "integer", "name": "x", "value": "${y} + 1", "expression": True},
    ),
    "let-map-value": (
        "type: let\nvariable: m\nvalue: {a: ${b}}",
        "let",
        {"var_type": None, "name": "m", "value": {"a": "${b}"}, "expression": False},
    ),
    "transform-list": (
        "type: transform\nvariable: t\nvalue: ${raw}\ntransform: [trim, to_upper_case]",
        "transform",
        {"var_type": None, "name": "t", "value": "${raw}", "ops": ("trim", "to_upper_case")},
    ),
    "transform-text": (
        "type: transform\nvalue: abc\ntransform: trim | to_upper_case",
        "transform",
        {"var_type": None, "name": None, "value": "abc", "ops": ("trim", "to_upper_case")},
    ),
    "transform-variable": (
        "type: transform\nvariable: {name: x, type: string}\ntransform: trim",
        "transform",
        {"var_type": "string", "name": "x", "value": "${x}", "ops": ("trim",)},
    ),
    "log": ("type: log\nmessage: hi\nlevel: warning", "log", {"message": "hi", "level": "warning"}),
    "log-level-with-shorthand": (
        "step: log hi there\nlevel: debug",
        "log",
        {"message": "hi there", "level": "debug"},
    ),
    "sleep": ("type: sleep\nduration: 2m", "sleep", {"duration": "2m"}),
    "wait-timeout": (
        "type: wait\nsignal: go\ntimeout: 1h",
        "wait",
        {"signal": "go", "timeout": "1h"},
    ),
    "goto-next": ("type: goto\nnext: end", "goto", {"target": "end"}),
    "goto-target": ("type: goto\ntarget: start", "goto", {"target": "start"}),
    "no-op": ("type: no-op", "no-op", {}),
    "return-map": (
        "type: return\nvalue: {a: 1, b: ${x}}",
        "return",
        {"value": {"a": 1, "b": "${x}"}},
    ),
    "fail": (
        "type: fail\nrethrow: yes\nmessage: m\nvalue: {code: 3}",
        "fail",
        {"rethrow": True, "message": "m", "value": {"code": 3}},
    ),
    "retry": (
        "type: retry\nreplay: force\nnext: start\nlimit: [3, 1h, 2 in 5m]\n"
        "backoff: {initial: 1s, factor: 2}\nhash: h\ntimeout: 2h",
        "retry",
        {
            "replay": "force",
            "from": "start",
            "limit": ("3", "1h", "2 in 5m"),
            "backoff": {"initial": "1s", "factor": 2},
            "timeout": "2h",
            "hash": "h",
        },
    ),
    "retry-replay-false": (
        "type: retry\nreplay: false\nnext: last\nlimit: 2",
        "retry",
        {**RETRY_DEFAULTS, "replay": False, "from": "last", "limit": ("2",)},
    ),
    "if": (
        "type: if\ncondition: {target: ${n}, greater-than: 10}\nthen: log x\nelse: [log x, log x]",
        "if",
        {
            "test": {"target": "${n}", "greater-than": 10},
            "then": (LOG_X,),
            "else": (LOG_X, LOG_X),
        },
    ),
    "if-step-key": (
        "type: if\ncondition: {target: ${n}}\nstep: log x",
        "if",
        {"test": {"target": "${n}"}, "then": (LOG_X,), "else": ()},
    ),
    "if-shorthand-then-steps": (
        "step: if ${x}\nsteps: [log x, log x]\nelse: log x",
        "if",
        {"test": {"target": "${x}", "when": "truthy"}, "then": (LOG_X, LOG_X), "else": (LOG_X,)},
    ),
    "switch": (
        "step: switch ${color}\ncases:\n  - step: return stop\n    condition: red\n  - log x",
        "switch",
        {"value": "${color}", "cases": (("return", {"value": "stop"}), LOG_X)},
    ),
    "switch-long": (
        "type: switch\nvalue: ${c}\ncases:\n  - step: log x\n    condition: {equals: 1}",
        "switch",
        {"value": "${c}", "cases": (LOG_X,)},
    ),
    "foreach-long": (
        "type: foreach\ntarget_var_name: n\ntarget: [1, 2]\nconcurrency: all\n"
        "target_index_var_name: i\nsteps: [log x]",
        "foreach",
        {
            "var": "n",
            "items": [1, 2],
            "do": (LOG_X,),
            "concurrency": "all",
            "reducing": None,
            "index_var": "i",
        },
    ),
    "foreach-reducing": (
        "step: foreach n in 1..4\nreducing: {total: 0}\ndo:\n  - let total = ${total} + ${n}",
        "foreach",
        {
            "var": "n",
            "items": "1..4",
            "do": (
                (
                    "let",
                    {
                        "var_type": None,
                        "name": "total",
                        "value": "${total} + ${n}",
                        "expression": True,
                    },
                ),
            ),
            "concurrency": 1,
            "reducing": {"total": 0},
            "index_var": "target_index",
        },
    ),
    "workflow": (
        "type: workflow\nsteps: [log x]",
        "workflow",
        {**NESTED_DEFAULTS, "steps": (LOG_X,)},
    ),
    "workflow-fan-out": (
        "type: workflow\ntarget: [a, b]\nconcurrency: 2\nlock: {name: l, scope: ${t}}\n"
        "retention: 3\ntarget_var_name: t\ntarget_index_var_name: n\nsteps: [log x]",
        "workflow",
        {
            **NESTED_DEFAULTS,
            "steps": (LOG_X,),
            "target": ["a", "b"],
            "has_target": True,
            "concurrency": 2,
            "lock": {"name": "l", "scope": "${t}"},
            "retention": "3",
            "var": "t",
            "index_var": "n",
        },
    ),
    "subworkflow-implied": ("steps: [log x]", "subworkflow", {"steps": (LOG_X,)}),
    "subworkflow": ("type: subworkflow\nsteps: [log x]", "subworkflow", {"steps": (LOG_X,)}),
    "activity": (
        "type: activity\nactivity_type: add\nversion: 2\ntask-list: q\n"
        "start_to_close_timeout: 10s\nheartbeat: 5s",
        "activity",
        {
            **ACTIVITY_DEFAULTS,
            "activity_type": "add",
            "version": "2",
            "task_list": "q",
            "start_to_close": "10s",
            "heartbeat": "5s",
        },
    ),
    "activity-shorthand-and-keys": (
        "step: activity add\nschedule_to_start: 1m\nschedule_to_close_timeout: ${t}\ntask_list: a",
        "activity",
        {
            **ACTIVITY_DEFAULTS,
            "activity_type": "add",
            "task_list": "a",
            "schedule_to_start": "1m",
            "schedule_to_close": "${t}",
        },
    ),
    "http": (
        "type: http\nendpoint: https://x\ntask_list: web",
        "http",
        {"url": "https://x", "task_list": "web"},
    ),
    "shell": ("type: shell\ncommand: ls -l", "shell", {"command": "ls -l", "task_list": None}),
    "signal": (
        "type: signal\nworkflow_id: ${w}\nsignal: go\nvalue: {x: 1}",
        "signal",
        {"workflow_id": "${w}", "name": "go", "value": {"x": 1}},
    ),
    "child": (
        "type: child\nworkflow_type: billing\nversion: '3'\ntask_list: b",
        "child",
        {"workflow_type": "billing", "version": "3", "task_list": "b"},
    ),
}


@pytest.mark.parametrize("case", list(LONG_FORM), ids=list(LONG_FORM))
def test_long_form(case: str) -> None:
    text, kind, args = LONG_FORM[case]
    step = one(item(text))
    assert (step.type, shape(step.args)) == (kind, args)
    assert (step.line, step.index) == (3, 0)


def test_unknown_keys_become_inputs() -> None:
    http = one(
        item(
            """
            type: http
            url: https://x
            method: POST
            headers: {A: b}
            body: {size: ${input.size}}
            status_code: 201
            """
        )
    )
    assert http.input == {
        "method": "POST",
        "headers": {"A": "b"},
        "body": {"size": "${input.size}"},
        "status_code": 201,
    }
    shell = one(item("step: shell ls\ninput: {env: {A: '1'}}\nexit_code: any"))
    assert shell.input == {"env": {"A": "1"}, "exit_code": "any"}
    log = one(item("type: log\nmessage: hi\ncategory: audit"))
    assert (log.args, log.input) == ({"message": "hi", "level": "info"}, {"category": "audit"})


def test_a_type_takes_its_own_meaning_of_a_common_key() -> None:
    wait = one(item("type: wait\nsignal: go\ntimeout: 1h"))
    assert (wait.args["timeout"], wait.timeout) == ("1h", None)
    retry = one(item("type: retry\ntimeout: 1h"))
    assert (retry.args["timeout"], retry.timeout) == ("1h", None)
    branch = one(item("type: if\ncondition: {target: ${x}}\nthen: log x"))
    assert (branch.args["test"], branch.condition) == ({"target": "${x}"}, None)
    goto = one(item("type: goto\nnext: end"))
    assert (goto.args["target"], goto.next) == ("end", None)
    # …while a step timeout on any other step is the common one
    sleep = one(item("step: sleep 1m\ntimeout: 30s"))
    assert (sleep.args, sleep.timeout) == ({"duration": "1m"}, timedelta(seconds=30))


def test_signal_keeps_name_as_the_display_name() -> None:
    step = one(item("step: signal w go = 1\nname: Tell w"))
    assert (step.name, step.args["name"]) == ("Tell w", "go")


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


# --- refusals -----------------------------------------------------------------------------

W = "name: wf\nsteps:\n"  # steps start on line 3

REFUSED: dict[str, tuple[str, int, str]] = {
    # id: (definition, the line named, what the reason says)
    "bad-yaml": ("name: wf\nsteps: [a, b\ntimeout: 1h\n", 3, "expected ','"),
    "not-a-mapping": ("- name: wf\n", 1, "a workflow definition is a mapping"),
    "scalar-root": ("\n\njust text\n", 3, "a workflow definition is a mapping"),
    "empty": ("", 1, "a workflow definition is a mapping"),
    "two-documents": ("name: wf\nsteps: [return x]\n---\nname: b\n", 3, "single document"),
    "duplicate-yaml-key": (W + "  - return x\nname: again\n", 4, "duplicate key 'name'"),
    "unknown-key": (
        "name: wf\nretries: 3\nsteps: [return x]\n",
        2,
        "unknown key 'retries' (known: continue-as-new-after,",
    ),
    "key-twice": ("name: wf\ntask_list: a\ntask-list: b\n", 3, "'task-list' is given twice"),
    "missing-name": ("# hi\nsteps: [return x]\n", 1, "`name` is required"),
    "empty-name": ("name: ''\nsteps: [return x]\n", 1, "`name` must not be empty"),
    "name-not-text": ("steps: [return x]\nname:\n  a: b\n", 3, "name must be text, not a map"),
    "missing-steps": ("name: wf\nversion: '2'\n", 1, "`steps` is required"),
    "empty-steps": ("name: wf\nsteps: []\n", 2, "`steps` must be a non-empty list"),
    "steps-not-a-list": ("name: wf\nsteps: return x\n", 2, "`steps` must be a non-empty list"),
    "bad-workflow-timeout": ("name: wf\ntimeout: 5x\n", 2, "timeout: invalid duration '5x'"),
    "bad-execution-timeout": (
        "name: wf\nexecution-timeout: soon\n",
        2,
        "execution-timeout: invalid duration 'soon'",
    ),
    "bad-workflow-replayable": (
        "name: wf\nreplayable: from here\n",
        2,
        "replayable must be one of enabled | disabled | from start | automatically",
    ),
    "bad-workflow-idempotent": ("name: wf\nidempotent: yes\n", 2, "idempotent must be one of all"),
    "lock-without-name": ("name: wf\nlock: {scope: x}\n", 2, "a lock map needs `name`"),
    "lock-unknown-key": ("name: wf\nlock:\n  name: a\n  entity: b\n", 4, "unknown lock key"),
    "empty-retention": ("name: wf\nretention: ''\n", 2, "`retention` must not be empty"),
    "bad-parameter-default": (
        "name: wf\nparameters:\n  n: {type: integer,\n      default: abc}\n",
        4,
        "parameter 'n': default 'abc' is not of type integer",
    ),
    "bad-parameter-type": (
        "name: wf\nparameters:\n  n: {type: number}\n",
        3,
        "parameter 'n' type must be one of string | integer",
    ),
    "bad-parameter-key": (
        "name: wf\nparameters:\n  n:\n    a: 1\n",
        4,
        "parameter 'n': unknown key 'a'",
    ),
    "bad-parameter-required": (
        "name: wf\nparameters:\n  n: {required: maybe}\n",
        3,
        "parameter 'n' required must be one of true",
    ),
    "unknown-step-type": (
        W + "  - log x\n  - frobnicate now\n",
        4,
        "unknown step type 'frobnicate' (known: activity, child, fail,",
    ),
    "unknown-type-key": (W + "  - type: nope\n", 3, "unknown step type 'nope'"),
    "empty-step": (W + "  - log x\n  -\n", 4, "empty step"),
    "type-and-shorthand": (
        W + "  - type: log\n    step: log x\n",
        4,
        "give either `type:` or `step:` (shorthand), not both",
    ),
    "two-shorthands": (W + "  - step: log x\n    s: log y\n", 4, "give one of `step:` and `s:`"),
    "no-type": (W + "  - message: hi\n", 3, "a step map needs `type:` or `step:`"),
    "shorthand-and-key": (
        W + "  - step: log x\n    message: y\n",
        4,
        "`message` is given by the shorthand and as a key",
    ),
    "input-and-key": (
        W + "  - step: log x\n    input: {a: 1}\n    a: 2\n",
        5,
        "'a' is given both as a key and in `input`",
    ),
    "input-not-a-map": (W + "  - step: log x\n    input: [1]\n", 4, "input must be a map"),
    "duplicate-id": (
        W + "  - id: a\n    step: log x\n  - id: a\n    step: log y\n",
        5,
        "duplicate id 'a' (first on line 3)",
    ),
    "duplicate-nested-id": (
        W + "  - id: a\n    step: log x\n  - type: workflow\n    steps:\n"
        "      - id: a\n        step: log y\n",
        7,
        "duplicate id 'a'",
    ),
    "duplicate-label": (W + "  - label a\n  - label a\n", 4, "duplicate id 'a'"),
    "reserved-id": (W + "  - id: End\n    step: log x\n", 3, "id 'End' is reserved"),
    "reserved-label": (W + "  - label here\n", 3, "id 'here' is reserved"),
    "id-not-a-word": (W + "  - id: a b\n    step: log x\n", 3, "id must be one word"),
    "id-on-handler": (
        W + "  - step: log x\n    on-error:\n      - id: h\n        step: log y\n",
        5,
        "a step inside on-error may not have an id",
    ),
    "id-inside-a-handler": (
        W + "  - step: log x\n    on-error:\n      - steps:\n          - label h\n",
        6,
        "a step inside on-error may not have an id",
    ),
    "id-on-workflow-handler": (
        "name: wf\non-error:\n  - id: h\n    step: log y\nsteps: [log x]\n",
        3,
        "may not have an id",
    ),
    "label-and-id": (W + "  - id: a\n    step: label b\n", 3, "`label ID` sets the id"),
    "label-without-id": (W + "  - type: label\n", 3, "label needs an id"),
    "bad-step-timeout": (
        W + "  - step: log x\n    timeout: 10 minutes\n",
        4,
        "timeout: invalid duration '10 minutes'",
    ),
    "bad-sleep": (W + "  - log x\n  - sleep 5x\n", 4, "sleep duration: invalid duration '5x'"),
    "bad-wait-timeout": (
        W + "  - wait signal go timeout soon\n",
        3,
        "wait timeout: invalid duration 'soon'",
    ),
    "bad-activity-timeout": (
        W + "  - step: activity a\n    heartbeat_timeout: 5\n",
        4,
        "activity heartbeat: invalid duration '5'",
    ),
    "bad-idempotent": (
        W + "  - step: log x\n    idempotent: maybe\n",
        4,
        "idempotent must be one of",
    ),
    "bad-step-replayable": (
        W + "  - step: log x\n    replayable: from start\n",
        4,
        "replayable must be one of from here | from here only | reset",
    ),
    "bad-let-type": (
        W + "  - let number x = 1\n",
        3,
        "unknown type 'number' for let (known: integer, double,",
    ),
    "let-without-value": (W + "  - log x\n  - let x\n", 4, "`let [TYPE] NAME = VALUE`"),
    "let-long-without-value": (
        W + "  - type: let\n    variable: x\n",
        3,
        "let needs `NAME = VALUE`",
    ),
    "let-bad-name": (W + "  - let a-b! = 1\n", 3, "bad variable name 'a-b!'"),
    "transform-without-ops": (W + "  - transform x = 1\n", 3, "cannot read 'x = 1'"),
    "transform-empty-op": (W + "  - transform x = 1 | | trim\n", 3, "none empty"),
    "log-without-message": (W + "  - log\n", 3, "log needs a message"),
    "bad-log-level": (
        W + "  - step: log x\n    level: loud\n",
        4,
        "log level must be one of debug, info, warning, error",
    ),
    "wait-without-signal": (W + "  - wait for it\n", 3, "cannot read 'for it'"),
    "goto-without-target": (W + "  - type: goto\n", 3, "goto needs a target"),
    "bad-goto-target": (W + "  - log x\n  - goto nowhere\n", 4, "goto 'nowhere' is not a step id"),
    "bad-next-target": (
        W + "  - step: log x\n    next: nowhere\n",
        4,
        "next 'nowhere' is not a step id (known: start, end, exit, last, default)",
    ),
    "bad-retry-target": (W + "  - retry from nowhere\n", 3, "retry from 'nowhere' is not"),
    "next-in-any-case": (W + "  - step: log x\n    next: END\n", 4, "'END' is not a step id"),
    "bad-retry-limit": (W + "  - retry limit soon\n", 3, "retry limit: invalid retry limit"),
    "bad-retry-limit-list": (
        W + "  - type: retry\n    limit:\n      - 3\n      - often\n",
        6,
        "retry limit:",
    ),
    "bad-retry-backoff": (
        W + "  - retry backoff 1s increasing fast\n",
        3,
        "retry backoff: invalid retry backoff",
    ),
    "bad-retry-replay": (W + "  - type: retry\n    replay: maybe\n", 4, "retry replay must be"),
    "retry-replay-false-without-target": (
        W + "  - type: retry\n    replay: false\n",
        3,
        "retry with replay false needs a target",
    ),
    "if-literal-target": (W + "  - if yes then log x\n", 3, "if 'yes' is always true"),
    "if-without-then": (W + "  - if ${x}\n", 3, "if needs `then`"),
    "if-without-condition": (W + "  - type: if\n    then: log x\n", 3, "if needs a condition"),
    "if-test-twice": (
        W + "  - step: if ${x} then log x\n    condition: {target: ${y}}\n",
        4,
        "if has a shorthand test and `condition`: give one",
    ),
    "switch-without-cases": (W + "  - switch ${x}\n", 3, "switch needs cases"),
    "switch-case-without-condition": (
        W + "  - step: switch ${x}\n    cases:\n      - log a\n      - log b\n",
        5,
        "every switch case but the last needs a condition",
    ),
    "foreach-without-steps": (W + "  - foreach x in ${y}\n", 3, "foreach needs steps"),
    "foreach-without-items": (
        W + "  - step: foreach x\n    do: log x\n",
        3,
        "foreach needs items",
    ),
    "reducing-with-concurrency": (
        W + "  - step: foreach x in ${y} do log x\n    reducing: {t: 0}\n    concurrency: 2\n",
        5,
        "reducing needs concurrency 1",
    ),
    "reducing-not-a-map": (
        W + "  - step: foreach x in ${y} do log x\n    reducing: total\n",
        4,
        "reducing must be a map",
    ),
    "workflow-without-steps": (W + "  - type: workflow\n", 3, "workflow needs steps"),
    "workflow-setting-with-steps": (
        W + "  - step: workflow retention 3\n    steps: [log x]\n",
        4,
        "a `workflow` setting step takes no `steps`",
    ),
    "workflow-bad-setting": (
        W + "  - workflow replayable sometimes\n",
        3,
        "workflow replayable must be one of",
    ),
    "empty-inline-list": (W + "  - []\n", 3, "an empty list is not a step"),
    "activity-without-type": (W + "  - type: activity\n", 3, "activity needs a type"),
    "http-without-url": (W + "  - http\n", 3, "http needs a url"),
    "shell-without-command": (W + "  - type: shell\n", 3, "shell needs a command"),
    "signal-without-name": (W + "  - type: signal\n    workflow_id: w\n", 3, "signal needs"),
    "child-without-type": (W + "  - child\n", 3, "child needs a workflow type"),
    "no-op-with-words": (W + "  - no-op now\n", 3, "cannot read 'now': use `no-op`"),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_refused_with_line_and_reason(case: str) -> None:
    text, line, reason = REFUSED[case]
    message = refused(text)
    assert message.startswith(f"wf.yaml:{line}: "), message
    assert reason in message, message


def test_the_default_file_name() -> None:
    with pytest.raises(DefinitionError, match=r"^<definition>:1: `name` is required"):
        parse("steps: [return x]\n")


def test_the_first_problem_in_the_file_is_reported() -> None:
    # the bad timeout on line 2 comes before the missing `steps`
    assert refused("name: wf\ntimeout: forever\n").startswith("wf.yaml:2: ")


# --- files and folders --------------------------------------------------------------------


def test_load_file(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("name: a\nsteps: [return x]\n", encoding="utf-8")
    loaded = load_file(path)
    assert (loaded.name, loaded.path, loaded.source) == ("a", str(path), path.read_text())


@pytest.mark.parametrize(
    ("contents", "line", "reason"),
    [
        (b"name: caf\xe9\nsteps: [return x]\n", 1, "not UTF-8 text"),
        (b"name: a\nsteps:\n  - log \xff\n", 3, "not UTF-8 text"),
        (b"name: bell\x07\nsteps: [return x]\n", 1, "special characters are not allowed"),
    ],
    ids=["not-utf8", "not-utf8-later", "control-character"],
)
def test_load_file_refuses_unreadable_text(
    contents: bytes, line: int, reason: str, tmp_path: Path
) -> None:
    message = refused(contents, tmp_path)
    assert message.startswith(f"{tmp_path / 'bad.yaml'}:{line}: "), message
    assert reason in message


def test_load_file_that_cannot_be_read(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.yaml", tmp_path):
        with pytest.raises(DefinitionError) as caught:
            load_file(path)
        assert str(caught.value).startswith(f"{path}: cannot read: ")


def test_load_dir_reads_yaml_files_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b.yml").write_text("name: b\nsteps: [return x]\n")
    (tmp_path / "a.yaml").write_text("name: a\nversion: 2\nsteps: [return x]\n")
    (tmp_path / "c.yaml").write_text("name: a\nsteps: [return x]\n")  # another version
    (tmp_path / "notes.txt").write_text("not a definition")
    (tmp_path / "sub.yaml").mkdir()
    loaded = load_dir(tmp_path)
    assert [(d.name, d.version, Path(d.path).name) for d in loaded] == [
        ("a", "2", "a.yaml"),
        ("b", "1", "b.yml"),
        ("a", "1", "c.yaml"),
    ]


def test_load_dir_refuses_a_type_defined_twice(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: same\nsteps: [return x]\n")
    (tmp_path / "b.yaml").write_text("name: same\nversion: '1'\nsteps: [return y]\n")
    with pytest.raises(DefinitionError) as caught:
        load_dir(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path / 'b.yaml'}: workflow same version 1 is also defined in {tmp_path / 'a.yaml'}"
    )


def test_load_dir_reports_the_bad_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\nsteps: [frobnicate]\n")
    with pytest.raises(DefinitionError, match=r"a\.yaml:2: unknown step type 'frobnicate'"):
        load_dir(tmp_path)

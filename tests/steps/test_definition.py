"""The step-workflow definition parser (workers/steps/definition.py and the
modules it reads with): every step type's shorthand and long form."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.steps.definitions import (
    ACTIVITY_DEFAULTS,
    LOG_X,
    NESTED_DEFAULTS,
    NO_FAN_OUT,
    RETRY_DEFAULTS,
    definition,
    item,
    one,
    shape,
)

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

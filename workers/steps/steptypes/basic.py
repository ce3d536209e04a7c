"""The simple step types: `let`, `transform`, `log`, `sleep`, `wait signal`,
`goto`, `label`, `no-op`, `return` and `fail`, each its parser and its body."""

from __future__ import annotations

import re
from typing import Any

import structlog
import yaml

from workers.steps import expressions, transforms
from workers.steps.errors import Return, StepError
from workers.steps.executor import (
    Entry,
    Frame,
    _duration,
    _span,
)
from workers.steps.expressions import check_expression
from workers.steps.limits import MAX_EXPRESSION_CHARS
from workers.steps.model import Step
from workers.steps.runtime import Cancelled, first_of
from workers.steps.scope import StepScope
from workers.steps.shorthand import _template, _tokens
from workers.steps.steptypes.base import StepType
from workers.steps.syntax import (
    _entries,
    _Given,
    _Invalid,
    _keys,
    _synthetic,
    _text,
)

log = structlog.get_logger("weft.steps")


# -- let and transform -----------------------------------------------------------------

_VAR_TYPES = ("integer", "double", "string", "boolean", "map", "list", "json", "yaml")
_NAME = re.compile(r"[A-Za-z_][\w-]*(\.[\w-]+)*")


def _variable(given: _Given) -> tuple[str | None, str | None]:
    """(type, name) from `variable:` (NAME or {name, type}) and the shorthand."""
    var_type = given.text("var_type")
    name: str | None = None
    if given.has("variable"):
        node = given.nodes["variable"]
        if isinstance(node, yaml.MappingNode):
            spec = {key: value for key, _, value in _entries(node, given.context)}
            name = _text(spec["name"], "variable name") if "name" in spec else None
            if "type" in spec:
                var_type = _text(spec["type"], "variable type")
        else:
            name = given.text("variable")
    if var_type is not None and var_type not in _VAR_TYPES:
        raise given.error(
            "var_type",
            f"unknown type {var_type!r} for {given.kind} (known: {', '.join(_VAR_TYPES)})",
        )
    if name is not None and not _NAME.fullmatch(name.strip()):
        raise given.error("variable", f"bad variable name {name!r}")
    return var_type, name.strip() if name is not None else None


def _parse_let(given: _Given) -> dict[str, Any]:
    var_type, name = _variable(given)
    if name is None or not given.has("value"):
        raise _Invalid(given.line, "let needs `NAME = VALUE` (long form: `variable:` and `value:`)")
    value = given.value("value")
    # The shorthand's value is always an expression; a long-form value only
    # when it is text (a map or a number is a value as written).
    expression = "value" in given.said or isinstance(value, str)
    if expression and isinstance(value, str):
        # Only the bounds here: other mistakes are the step's ExpressionError,
        # which its on-error may handle.
        problem = check_expression(value)
        if problem:
            raise given.error("value", f"let {name}: {problem}")
    return {"var_type": var_type, "name": name, "value": value, "expression": expression}


async def _run_let(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    value = args.get("value")
    if args.get("expression") and isinstance(value, str):
        result = expressions.evaluate(value, scope)
    else:
        result = expressions.interpolate(value, scope)
    if args.get("var_type"):
        result = expressions.coerce(str(args["var_type"]), result)
    name = str(args["name"])
    if name == "output":
        return result, None
    _assign(frame.variables, name, result)
    return frame.previous_output, None


def _assign(variables: dict[str, Any], name: str, value: Any) -> None:
    """`let a.b.c = v` sets inside maps, creating them as needed."""
    parts = name.split(".")
    target = variables
    for part in parts[:-1]:
        inner = target.get(part)
        if not isinstance(inner, dict):
            inner = {}
            target[part] = inner
        target = inner
    target[parts[-1]] = value


def _transform_shorthand(text: str, line: int) -> dict[str, yaml.Node]:
    tokens = _tokens(text)
    pipe = next((t for t in tokens if t.text == "|" and not t.quoted), None)
    if pipe is None:
        raise _Invalid(line, f"cannot read {text!r}: use `{_TRANSFORM_USAGE}`")
    head = text[: pipe.start].strip()
    for reader in _TRANSFORM_HEADS:
        try:
            found = reader(head, line)
        except _Invalid:
            continue
        return {**found, "ops": _synthetic(text[pipe.end :].strip(), line)}
    raise _Invalid(line, f"cannot read {text!r}: use `{_TRANSFORM_USAGE}`")


_TRANSFORM_USAGE = "transform [TYPE] NAME = VALUE | op | op` (or `value V | …`, `variable NAME | …"
_TRANSFORM_HEADS = (
    _template("[ ${var_type} ] variable ${variable}", _TRANSFORM_USAGE),
    _template("[ ${var_type} ] value ${value...}", _TRANSFORM_USAGE),
    _template("[ ${var_type} ] ${variable} = ${value...}", _TRANSFORM_USAGE),
)


def _parse_transform(given: _Given) -> dict[str, Any]:
    var_type, name = _variable(given)
    if name is None and not given.has("value"):
        raise _Invalid(given.line, "transform needs a variable or a value")
    value = given.value("value") if given.has("value") else f"${{{name}}}"
    ops = _ops(given)
    return {"var_type": var_type, "name": name, "value": value, "ops": ops}


def _ops(given: _Given) -> tuple[str, ...]:
    node = given.nodes.get("ops")
    if isinstance(node, yaml.SequenceNode):
        ops = [(_text(item, "transform") or "").strip() for item in node.value]
    else:
        text = given.text("ops") or ""
        cuts = [t for t in _tokens(text) if t.text == "|" and not t.quoted]
        edges = [0, *(p for t in cuts for p in (t.start, t.end)), len(text)]
        ops = [text[edges[i] : edges[i + 1]].strip() for i in range(0, len(edges), 2)]
    if not ops or any(not op for op in ops):
        raise given.error("ops", "transform needs operations: `VALUE | op | op`, none empty")
    for op in ops:
        if len(op) > MAX_EXPRESSION_CHARS:
            raise given.error(
                "ops",
                f"a transform operation is {len(op)} characters long:"
                f" the limit is {MAX_EXPRESSION_CHARS}",
            )
    return tuple(ops)


async def _run_transform(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    value = expressions.interpolate(args.get("value"), scope)
    result = transforms.apply(value, list(args.get("ops", ())), scope)
    if args.get("var_type"):
        result = expressions.coerce(str(args["var_type"]), result)
    name = args.get("name")
    if name:
        _assign(frame.variables, str(name), result)
        return frame.previous_output, None
    return result, None


# -- log -------------------------------------------------------------------------------

_LOG_LEVELS = ("debug", "info", "warning", "error")


def _parse_log(given: _Given) -> dict[str, Any]:
    message = given.text("message")
    if message is None:
        raise _Invalid(given.line, "log needs a message")
    level = given.text("level") or "info"
    if level not in _LOG_LEVELS:
        raise given.error("level", f"log level must be one of {', '.join(_LOG_LEVELS)}")
    return {"message": message, "level": level}


async def _run_log(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    message = expressions.interpolate(step.args.get("message", ""), scope)
    if not frame.run.ops.replaying:
        level = str(step.args.get("level", "info"))
        getattr(log, level if level in ("debug", "info", "warning", "error") else "info")(
            "step.log", message=message, workflow_id=frame.run.ops.workflow_id, step=step.label
        )
    return frame.previous_output, None


# -- sleep and wait signal -------------------------------------------------------------


def _parse_sleep(given: _Given) -> dict[str, Any]:
    given.required("duration", "sleep needs a duration: `sleep 5s`")
    return {"duration": given.duration("duration")}


async def _run_sleep(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    delay = _duration(expressions.interpolate(step.args.get("duration"), scope), "sleep")
    await frame.run.ops.timer(f"{entry.key}:sleep", delay)
    return frame.previous_output, None


def _parse_wait(given: _Given) -> dict[str, Any]:
    signal = given.required("signal", "wait needs a signal: `wait signal NAME`")
    return {"signal": signal, "timeout": given.duration("timeout")}


async def _run_wait(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    name = str(expressions.interpolate(step.args.get("signal"), scope))
    ops = frame.run.ops
    signal = ops.signal(name)
    timeout = step.args.get("timeout")
    if timeout is None or signal.done:
        return await signal, None
    delay = _duration(expressions.interpolate(timeout, scope), "wait timeout")
    timer = ops.timer(f"{entry.key}:wait", delay)
    try:
        winner = await first_of(signal, timer)
    except Cancelled:
        signal.cancel()
        timer.cancel()
        raise
    if winner is timer:
        signal.cancel()
        raise StepError("Timeout", f"no signal {name!r} within {_span(delay)}")
    timer.cancel()
    return signal.result(), None


# -- goto, label and no-op -------------------------------------------------------------


def _parse_goto(given: _Given) -> dict[str, Any]:
    target = given.required("target", "goto needs a target: `goto ID`")
    given.context.jump(target, given.line_of("target"), "goto")
    return {"target": target}


async def _run_goto(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    target = str(expressions.interpolate(step.args.get("target"), scope))
    return frame.previous_output, target


def _parse_label(given: _Given) -> dict[str, Any]:
    # `stepparse._build` turns this into the step's id.
    return {"label": given.text("label")} if given.has("label") else {}


def _parse_no_args(given: _Given) -> dict[str, Any]:
    return {}


async def _run_no_op(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    return frame.previous_output, None


# -- return and fail -------------------------------------------------------------------


def _parse_return(given: _Given) -> dict[str, Any]:
    return {"value": given.value("value")}


async def _run_return(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    raise Return(expressions.interpolate(step.args.get("value"), scope))


def _parse_fail(given: _Given) -> dict[str, Any]:
    return {
        "rethrow": given.flag("rethrow"),
        "message": given.text("message"),
        "value": given.value("value"),
    }


async def _run_fail(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    message = args.get("message")
    text = str(expressions.interpolate(message, scope)) if message is not None else None
    value = expressions.interpolate(args.get("value"), scope)
    if args.get("rethrow"):
        if frame.error is None:
            raise StepError("Fail", "fail rethrow outside an error handler")
        original = frame.error
        raise StepError(
            str(original.get("type", "Fail")),
            text or str(original.get("message", "")),
            original.get("details") if value is None else value,
            step=str(original.get("step", "")),
        )
    raise StepError("Fail", text or "failed", value)


# -- the table -------------------------------------------------------------------------


TYPES: dict[str, StepType] = {
    "let": StepType(
        _template(
            "[ ${var_type} ] ${variable} = ${value...}",
            "let [TYPE] NAME = VALUE",
            raw=frozenset({"value"}),
        ),
        _keys("variable", "value"),
        _parse_let,
        _run_let,
    ),
    "transform": StepType(
        _transform_shorthand,
        _keys("variable", "value", transform="ops"),
        _parse_transform,
        _run_transform,
    ),
    "log": StepType(
        _template("${message...}", "log MESSAGE"),
        _keys("message", "level"),
        _parse_log,
        _run_log,
    ),
    "sleep": StepType(
        _template("${duration}", "sleep DURATION"),
        _keys("duration"),
        _parse_sleep,
        _run_sleep,
    ),
    "wait": StepType(
        _template("signal ${signal} [ timeout ${timeout} ]", "wait signal NAME [timeout DURATION]"),
        _keys("signal", "timeout"),
        _parse_wait,
        _run_wait,
    ),
    "goto": StepType(
        _template("${target}", "goto ID"),
        _keys("target", next="target"),
        _parse_goto,
        _run_goto,
    ),
    "label": StepType(
        _template("${label}", "label ID"),
        {},
        _parse_label,
        _run_no_op,
    ),
    "no-op": StepType(
        _template("", "no-op"),
        {},
        _parse_no_args,
        _run_no_op,
    ),
    "return": StepType(
        _template("[ ${value...} ]", "return VALUE"),
        _keys("value"),
        _parse_return,
        _run_return,
    ),
    "fail": StepType(
        _template(
            "[ ?${rethrow} rethrow ] [ message ${message...} ]", "fail [rethrow] [message TEXT]"
        ),
        _keys("rethrow", "message", "value"),
        _parse_fail,
        _run_fail,
        idempotent=False,
    ),
}

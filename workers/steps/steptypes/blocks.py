"""Steps that run an inline block sharing their frame's variables: `if`,
`switch` and `subworkflow`, each its parser and its body."""

from __future__ import annotations

from typing import Any

import yaml

from workers.steps import conditions, expressions
from workers.steps.errors import Jump
from workers.steps.executor import (
    Entry,
    Frame,
)
from workers.steps.model import Step
from workers.steps.scope import StepScope
from workers.steps.shorthand import _template
from workers.steps.steptypes.base import StepType
from workers.steps.syntax import (
    _Given,
    _Invalid,
    _keys,
    _line,
)

# -- if --------------------------------------------------------------------------------


def _parse_if(given: _Given) -> dict[str, Any]:
    if given.has("target") and given.has("test"):
        raise given.error("test", "if has a shorthand test and `condition`: give one")
    if given.has("target"):
        test = _if_test(given)
    elif given.has("test"):
        test = given.value("test")
    else:
        raise _Invalid(given.line, "if needs a condition: `if ${EXPR} then STEP`")
    then = given.steps("then", "if needs `then` (a step or a list of steps)")
    otherwise = given.parse_steps(given.nodes["else"], given.context) if given.has("else") else ()
    return {"test": test, "then": then, "else": otherwise}


def _if_test(given: _Given) -> dict[str, Any]:
    target = given.required("target", "if needs a condition")
    if "${" not in target:
        raise given.error(
            "target", f"if {target!r} is always true: test a `${{…}}` value, e.g. `if ${{x}}`"
        )
    if given.has("check"):
        return {"target": target, "check": given.text("check"), "assert": {"when": "present"}}
    return {"target": target, "when": "truthy"}


async def _run_if(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    test = step.args.get("test")
    met = conditions.check(test, scope) if test is not None else False
    branch = step.args.get("then" if met else "else") or ()
    if not branch:
        return frame.previous_output, None
    return await _inline(frame, tuple(branch), f"{entry.key}.{'t' if met else 'e'}/")


async def _inline(
    frame: Frame, steps: tuple[Step, ...], path: str, *, check_condition: bool = True
) -> tuple[Any, str | None]:
    """Run a block that shares the frame's variables; `return` and jumps to
    ids outside it end it and act on the enclosing frame."""
    block = Frame(
        frame.run,
        steps,
        path,
        variables=frame.variables,
        input=frame.input,
        parent=frame,
        error=frame.error,
    )
    try:
        if not check_condition:
            # A switch case: its condition chose it, against the switch value;
            # its `next` applies to the switch's frame.
            target = await block.run_step(0, check_condition=False)
            return block.previous_output, target
        output = await block.run_steps()
    except Jump as jump:
        if frame.index_of(jump.target) is not None:
            frame.previous_output = block.previous_output
            return block.previous_output, jump.target
        raise
    return output, None


# -- switch ----------------------------------------------------------------------------


def _parse_switch(given: _Given) -> dict[str, Any]:
    node = given.nodes.get("cases")
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise _Invalid(
            _line(node) if node is not None else given.line, "switch needs cases (a list of steps)"
        )
    cases = given.parse_steps(node, given.context)
    for case in cases[:-1]:
        if case.condition is None:
            raise _Invalid(case.line, "every switch case but the last needs a condition")
    return {"value": given.value("value"), "cases": cases}


async def _run_switch(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    value = expressions.interpolate(step.args.get("value"), scope)
    for number, case in enumerate(step.args.get("cases", ())):
        if case.condition is not None and not conditions.check(
            case.condition, scope, default_target=value
        ):
            continue
        return await _inline(frame, (case,), f"{entry.key}.c{number}/", check_condition=False)
    return frame.previous_output, None


# -- subworkflow -----------------------------------------------------------------------


def _parse_subworkflow(given: _Given) -> dict[str, Any]:
    return {"steps": given.steps("steps", "subworkflow needs steps")}


async def _run_subworkflow(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    return await _inline(frame, tuple(step.args.get("steps", ())), f"{entry.key}/")


# -- the table -------------------------------------------------------------------------


TYPES: dict[str, StepType] = {
    "if": StepType(
        _template(
            "${target} [ == ${check...} ] [ then ${then...} ]", "if ${EXPR} [== VALUE] then STEP"
        ),
        _keys("then", "else", condition="test", step="then", steps="then"),
        _parse_if,
        _run_if,
        compound=True,
    ),
    "switch": StepType(
        _template("[ ${value...} ]", "switch VALUE"),
        _keys("value", "cases"),
        _parse_switch,
        _run_switch,
        compound=True,
    ),
    "subworkflow": StepType(
        _template("", "subworkflow"),
        _keys("steps"),
        _parse_subworkflow,
        _run_subworkflow,
        compound=True,
    ),
}

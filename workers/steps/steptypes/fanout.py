"""Fan-out: `foreach` and nested workflows (`workflow` with steps, a `target`
and `concurrency`, or `workflow replayable …` / `workflow retention …`), each
its parser and its body."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sdk import retention
from workers.steps import expressions
from workers.steps.errors import Return, StepError
from workers.steps.executor import (
    Entry,
    Frame,
    Run,
    _span,
    run_workflow,
    within,
)
from workers.steps.limits import MAX_FOREACH_ITEMS
from workers.steps.model import Step
from workers.steps.runtime import Task, first_of
from workers.steps.scope import StepScope
from workers.steps.shorthand import _template
from workers.steps.steptypes.base import StepType
from workers.steps.syntax import (
    _NESTED_REPLAYABLE,
    _Given,
    _Invalid,
    _keys,
    _lock,
    _retention,
    _word,
)

# -- shared by foreach and workflow ----------------------------------------------------


def _fan_out_args(given: _Given) -> dict[str, Any]:
    """`concurrency` and `reducing`, shared by `foreach` and `workflow`."""
    concurrency = given.value("concurrency", 1)
    reducing = given.value("reducing")
    if reducing is not None and not isinstance(reducing, dict):
        raise given.error("reducing", "reducing must be a map of variable: initial value")
    # Each iteration reads the variables the previous one left: one at a time.
    if reducing is not None and str(concurrency).strip() != "1":
        raise given.error("concurrency", "reducing needs concurrency 1")
    return {"concurrency": concurrency, "reducing": reducing}


_FAN_OUT = _keys(
    "concurrency",
    "reducing",
    target_var_name="var",
    target_index_var_name="index_var",
)


# -- foreach ---------------------------------------------------------------------------


def _parse_foreach(given: _Given) -> dict[str, Any]:
    var = given.required("var", "foreach needs a variable: `foreach VAR in EXPR`")
    if not given.has("items"):
        raise _Invalid(given.line, "foreach needs items: `foreach VAR in EXPR` or `target:`")
    return {
        "var": var,
        "items": given.value("items"),
        "do": given.steps("do", "foreach needs steps: `do STEP`, `do:` or `steps:`"),
        **_fan_out_args(given),
        "index_var": (given.text("index_var") or "target_index").strip(),
    }


async def _run_foreach(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    items = _items(expressions.interpolate(args.get("items"), scope))
    body = tuple(args.get("do", ()))
    var, index_var = str(args.get("var", "item")), str(args.get("index_var", "target_index"))
    # A foreach body sees the enclosing variables (each item its own copy).
    frame_for = _item_frames(frame, entry, body, var, index_var, frame.variables, frame.input)
    return await _fan_out(frame, step, items, frame_for, scope)


# -- workflow --------------------------------------------------------------------------


def _parse_workflow(given: _Given) -> dict[str, Any]:
    if given.said & {"replayable", "retention"}:
        return _workflow_setting(given)
    return {
        "steps": given.steps("steps", "workflow needs steps"),
        "target": given.value("target"),
        "has_target": given.has("target"),
        **_fan_out_args(given),
        "lock": _lock(given.nodes["lock"], given.context) if given.has("lock") else None,
        "replayable": None,
        "retention": _retention(given.nodes["retention"]) if given.has("retention") else None,
        "setting": None,
        "var": (given.text("var") or "target").strip(),
        "index_var": (given.text("index_var") or "target_index").strip(),
    }


def _workflow_setting(given: _Given) -> dict[str, Any]:
    """`workflow replayable …` / `workflow retention …`: a change to the
    running workflow's settings, with no steps of its own."""
    if given.said >= {"replayable", "retention"}:
        raise _Invalid(given.line, "give `workflow replayable …` and `workflow retention …` apart")
    for key in ("steps", "target", "lock"):
        if given.has(key):
            raise given.error(key, f"a `workflow` setting step takes no `{key}`")
    setting = "replayable" if "replayable" in given.said else "retention"
    replayable = retention = None
    if setting == "replayable":
        replayable = _word(given.nodes["replayable"], "workflow replayable", _NESTED_REPLAYABLE)
    else:
        retention = _retention(given.nodes["retention"])
    return {
        "steps": (),
        "target": None,
        "has_target": False,
        "concurrency": 1,
        "reducing": None,
        "lock": None,
        "replayable": replayable,
        "retention": retention,
        "setting": setting,
        "var": "target",
        "index_var": "target_index",
    }


async def _run_workflow(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    setting = args.get("setting")
    if setting == "retention":
        record_retention(frame.run, args.get("retention"), scope)
    if setting:
        # `workflow replayable …` was applied at the step start.
        return frame.previous_output, None
    if args.get("lock"):
        # The lock is held for the whole block: every target, the block's own
        # on-error, and its timeout (which starts once the lock is held).
        run = frame.run
        name = lock_name(args["lock"], scope)
        if name == run.workflow_lock:
            raise StepError("LockFailed", f"the workflow holds lock {name!r} already")
        generation = run.generation
        await run.ops.lock(name)
        try:
            return await _nested_body(frame, step, entry, scope)
        finally:
            if run.generation == generation:
                run.ops.release_lock(name)
            # else a replay abandoned this path: the lock stays, for the new one.
    return await _nested_body(frame, step, entry, scope)


def lock_name(value: Any, scope: StepScope) -> str:
    """`lock: NAME` or `lock: {name, scope}` (a key of both parts), resolved."""
    resolved = expressions.interpolate(value, scope)
    if isinstance(resolved, Mapping):
        name = str(resolved.get("name", ""))
        part = resolved.get("scope")
        return f"{name}:{part}" if part not in (None, "") else name
    return str(resolved)


def record_retention(run: Run, text: Any, scope: StepScope) -> None:
    """Tell the service the run's retention policy: a `retention` marker, which it
    reads (STEPS.md "Retention"); `context` there means the policy before."""
    policy = str(expressions.interpolate(text, scope))
    try:
        retention.parse(policy)
    except retention.RetentionError as exc:
        raise StepError("ExpressionError", str(exc)) from None
    run.ops.marker("retention", {"retention": policy})


async def _nested_body(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    body = tuple(args.get("steps", ()))
    if not args.get("has_target"):
        child = Frame(
            frame.run, body, f"{entry.key}/", variables={}, input=entry.input, parent=frame
        )
        return await _run_nested(child, step), None
    items = _items(expressions.interpolate(args.get("target"), scope))
    var, index_var = str(args.get("var", "target")), str(args.get("index_var", "target_index"))
    # A nested workflow has variables of its own: only the item and the reduced ones.
    frame_for = _item_frames(frame, entry, body, var, index_var, {}, entry.input)
    return await _fan_out(frame, step, items, frame_for, scope)


def _item_frames(
    frame: Frame,
    entry: Entry,
    body: tuple[Any, ...],
    var: str,
    index_var: str,
    inherited: dict[str, Any],
    input: Any,
) -> Callable[[int, Any, dict[str, Any]], Frame]:
    """How `_fan_out` makes the frame of each item: `inherited` variables, then the
    reduced ones, then the item and its index."""

    def frame_for(position: int, item: Any, reduced: dict[str, Any]) -> Frame:
        variables = copy.deepcopy(inherited)
        variables.update(reduced)
        _spread(variables, var, item)
        variables[index_var] = position
        return Frame(
            frame.run,
            body,
            f"{entry.key}[{position}]/",
            variables=variables,
            input=input,
            parent=frame,
        )

    return frame_for


async def _run_nested(child: Frame, step: Step) -> Any:
    """A nested workflow: its own loop; `return` ends only it. A `workflow`
    step's `on-error` and `timeout` are each child's own (Brooklyn's
    CustomWorkflowStep): the handler runs inside the child, as a workflow-level
    one, and a timeout fails the child without running it."""
    if step.type != "workflow":
        try:
            return await child.run_steps()
        except Return as done:
            return done.value
    on_error = step.on_error
    if step.timeout is None:
        output, _ = await run_workflow(child, on_error)
        return output
    finished, result = await within(
        child.run, run_workflow(child, on_error), f"{child.path}:timeout", step.timeout
    )
    if not finished:
        raise StepError(
            "Timeout", f"the nested workflow of {step.label} timed out after {_span(step.timeout)}"
        )
    return result[0]


async def _fan_out(
    frame: Frame,
    step: Step,
    items: Sequence[Any],
    frame_for: Any,
    scope: StepScope,
) -> tuple[Any, str | None]:
    reducing = step.args.get("reducing")
    if reducing:
        reduced = dict(expressions.interpolate(dict(reducing), scope))
        for position, item in enumerate(items):
            child: Frame = frame_for(position, item, reduced)
            await _run_nested(child, step)
            reduced = {name: child.variables.get(name) for name in reduced}
        frame.variables.update(copy.deepcopy(reduced))
        return reduced, None
    limit = _concurrency(
        expressions.interpolate(step.args.get("concurrency", 1), scope), len(items)
    )
    results: list[Any] = [None] * len(items)
    running: dict[int, Task] = {}
    position = 0
    try:
        while position < len(items) or running:
            while position < len(items) and len(running) < limit:
                running[position] = frame.run.spawn(
                    _run_nested(frame_for(position, items[position], {}), step)
                )
                position += 1
            finished = await first_of(*(task.future for task in running.values()))
            for number, task in list(running.items()):
                if task.future is finished:
                    del running[number]
                    results[number] = task.future.result()
    except BaseException:
        for task in running.values():
            task.cancel()
        raise
    return results, None


def _concurrency(value: Any, count: int) -> int:
    """`concurrency`: a number, `all`, a negative number (all but N) or `P%`."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("all", "unlimited"):
            return max(count, 1)
        if text.endswith("%"):
            try:
                return max(int(count * float(text[:-1]) / 100), 1)
            except (ValueError, OverflowError):
                raise StepError("ExpressionError", f"bad concurrency {value!r}") from None
        try:
            value = int(text)
        except ValueError:
            raise StepError("ExpressionError", f"bad concurrency {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise StepError("ExpressionError", f"bad concurrency {value!r}")
    if value < 0:
        value = count + value
    if value <= 0:
        raise StepError("ExpressionError", f"concurrency must be at least 1 (got {value})")
    limit: int = value
    return limit


_RANGE = re.compile(r"^\s*(-?\d{1,18})\s*\.\.\s*(-?\d{1,18})\s*$")


def _items(value: Any) -> Sequence[Any]:
    """What a `foreach` (or a nested workflow's `target`) iterates: a list, a
    map's entries, or `M..N` as a `range`, never built as a list; at most
    MAX_FOREACH_ITEMS of them."""
    items: Sequence[Any] | None = None
    if isinstance(value, list | tuple):
        items = list(value)
    elif isinstance(value, str) and (match := _RANGE.match(value)):
        items = range(int(match.group(1)), int(match.group(2)) + 1)
    elif isinstance(value, dict):
        items = [{"key": k, "value": v} for k, v in value.items()]
    if items is None:
        shown = expressions.text(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise StepError("ExpressionError", f"cannot iterate over {shown!r}: give a list or M..N")
    if len(items) > MAX_FOREACH_ITEMS:
        raise StepError(
            "ExpressionError",
            f"cannot iterate over {len(items)} items: the limit is {MAX_FOREACH_ITEMS}",
        )
    return items


def _spread(variables: dict[str, Any], var: str, item: Any) -> None:
    """`foreach {a, b} in …` spreads a map's keys into variables."""
    text = var.strip()
    if text.startswith("{") and text.endswith("}"):
        names = [n.strip() for n in text[1:-1].split(",") if n.strip()]
        source = item if isinstance(item, Mapping) else {}
        for name in names:
            variables[name] = source.get(name)
    else:
        variables[text] = item


# -- the table -------------------------------------------------------------------------


TYPES: dict[str, StepType] = {
    "foreach": StepType(
        _template("${var} [ in ${items...} [ do ${do...} ] ]", "foreach VAR in EXPR [do STEP]"),
        {**_FAN_OUT, "target": "items", "do": "do", "steps": "do"},
        _parse_foreach,
        _run_foreach,
        compound=True,
        own_frame=True,
    ),
    "workflow": StepType(
        _template(
            "[ replayable ${replayable...} ] [ retention ${retention...} ]",
            "workflow replayable VALUE` or `workflow retention VALUE",
        ),
        {**_FAN_OUT, **_keys("steps", "target", "lock", "retention")},
        _parse_workflow,
        _run_workflow,
        compound=True,
        own_frame=True,
    ),
}

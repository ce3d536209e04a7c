"""External steps, run as activity tasks on runners (`activity`, `http`,
`shell`), and steps that talk to other workflows (`signal`, `child`), each
its parser and its body."""

from __future__ import annotations

import hashlib
from typing import Any

from workers.builtins import ShellValue, shell_script
from workers.steps import expressions
from workers.steps.errors import Replay, StepError
from workers.steps.executor import (
    Entry,
    Frame,
    _duration,
)
from workers.steps.model import HTTP_ACTIVITY, SHELL_ACTIVITY, Step
from workers.steps.runtime import Future
from workers.steps.scope import StepScope
from workers.steps.shorthand import _template
from workers.steps.steptypes.base import StepType
from workers.steps.steptypes.retry import _retry_hash
from workers.steps.syntax import (
    _Given,
    _keys,
)

# -- external steps: activities on runners ---------------------------------------------

_ACTIVITY_TIMEOUTS = ("schedule_to_start", "start_to_close", "schedule_to_close", "heartbeat")
_TASK_LIST = {"task_list": "task_list", "task-list": "task_list"}


def _parse_activity(given: _Given) -> dict[str, Any]:
    activity_type = given.required("activity_type", "activity needs a type: `activity TYPE`")
    args: dict[str, Any] = {
        "activity_type": activity_type,
        "version": (given.text("version") or "").strip(),
        "task_list": given.text("task_list"),
    }
    for name in _ACTIVITY_TIMEOUTS:
        args[name] = given.duration(name)
    return args


async def _run_activity(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    payload: Any = entry.input if step.input else None
    return await _schedule(frame, step, entry, scope, str(args["activity_type"]), payload), None


def _parse_http(given: _Given) -> dict[str, Any]:
    url = given.required("url", "http needs a url: `http URL`")
    return {"url": url, "task_list": given.text("task_list")}


async def _run_http(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    payload = {"url": expressions.interpolate(step.args.get("url"), scope), **entry.input}
    return await _schedule(frame, step, entry, scope, HTTP_ACTIVITY, payload), None


def _parse_shell(given: _Given) -> dict[str, Any]:
    command = given.required("command", "shell needs a command: `shell COMMAND`")
    return {"command": command, "task_list": given.text("task_list")}


async def _run_shell(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    # Values travel as the script's arguments, never as its text (no injection).
    template = expressions.pieces(str(step.args.get("command")), scope)
    command, args = shell_script([ShellValue(t) if value else t for t, value in template])
    payload = {"command": command, "args": args, **entry.input}
    return await _schedule(frame, step, entry, scope, SHELL_ACTIVITY, payload), None


_TIMEOUT_KEYS = ("schedule_to_start", "start_to_close", "schedule_to_close", "heartbeat")


async def _schedule(
    frame: Frame, step: Step, entry: Entry, scope: StepScope, activity_type: str, payload: Any
) -> Any:
    args = step.args
    timeouts = {
        name: _duration(expressions.interpolate(args[name], scope), name)
        for name in _TIMEOUT_KEYS
        if args.get(name) is not None
    }
    task_list = args.get("task_list")
    future: Future = frame.run.ops.activity(
        entry.key,
        activity_type,
        payload,
        version=str(args.get("version") or ""),
        task_list=str(expressions.interpolate(task_list, scope)) if task_list else "",
        timeouts=dict(timeouts),
    )
    try:
        return await future
    except StepError as error:
        if _replays_by_itself(frame, step, error):
            # `replayable: automatically`: the runner vanished (its activity timed
            # out start-to-close or by heartbeat), so replay resuming: the step
            # again if idempotent, else from the last replay point.
            raise Replay("resume") from None
        raise


MAX_CHILD_ID = 1000  # the service's longest workflow id
MAX_AUTOMATIC_REPLAYS = 10
"""Automatic replays of one step, after which its timeout is its error."""


def _replays_by_itself(frame: Frame, step: Step, error: StepError) -> bool:
    run = frame.run
    if run.definition.replayable != "automatically" or error.type != "ActivityTimedOut":
        return False
    details = error.details if isinstance(error.details, dict) else {}
    if details.get("timeout_type") not in ("START_TO_CLOSE", "HEARTBEAT"):
        return False
    place = _retry_hash(frame, step)  # the step's place, whatever its visit
    run.automatic_replays[place] = run.automatic_replays.get(place, 0) + 1
    return run.automatic_replays[place] <= MAX_AUTOMATIC_REPLAYS


# -- steps that talk to other workflows ------------------------------------------------


def _parse_signal(given: _Given) -> dict[str, Any]:
    reason = "signal needs a workflow id and a name: `signal WORKFLOW_ID NAME [= VALUE]`"
    return {
        "workflow_id": given.required("workflow_id", reason),
        "name": given.required("name", reason),
        "value": given.value("value"),
    }


async def _run_signal(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    target = str(expressions.interpolate(args.get("workflow_id"), scope))
    name = str(expressions.interpolate(args.get("name"), scope))
    value = expressions.interpolate(args.get("value"), scope)
    await frame.run.ops.signal_workflow(target, name, value)
    return frame.previous_output, None


def _parse_child(given: _Given) -> dict[str, Any]:
    workflow_type = given.required("workflow_type", "child needs a workflow type: `child TYPE`")
    return {
        "workflow_type": workflow_type,
        "version": (given.text("version") or "").strip(),
        "task_list": given.text("task_list"),
    }


async def _run_child(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    ops = frame.run.ops
    # Unique to this run and this start of the step: a replayed or continued run
    # starts children of its own.
    child_id = f"{ops.workflow_id}/{ops.run_id[:8]}/{entry.key}"
    if len(child_id) > MAX_CHILD_ID:
        # Still unique and stable, within the service's id length.
        digest = hashlib.sha256(child_id.encode()).hexdigest()[:32]
        child_id = f"{ops.workflow_id[: MAX_CHILD_ID - 40]}/child-{digest}"
    task_list = args.get("task_list")
    result = await ops.child(
        child_id,
        str(expressions.interpolate(args["workflow_type"], scope)),
        entry.input if step.input else None,
        version=str(args.get("version") or ""),
        task_list=str(expressions.interpolate(task_list, scope)) if task_list else "",
    )
    return result, None


# -- the table -------------------------------------------------------------------------


TYPES: dict[str, StepType] = {
    "activity": StepType(
        _template("${activity_type}", "activity TYPE"),
        {
            **_keys("activity_type", "version", *_ACTIVITY_TIMEOUTS),
            **{f"{name}_timeout": name for name in _ACTIVITY_TIMEOUTS},
            **_TASK_LIST,
        },
        _parse_activity,
        _run_activity,
        external=True,
        idempotent=False,
    ),
    "http": StepType(
        _template("${url}", "http URL"),
        {**_keys("url", endpoint="url"), **_TASK_LIST},
        _parse_http,
        _run_http,
        external=True,
        idempotent=False,
    ),
    "shell": StepType(
        _template("${command...}", "shell COMMAND"),
        {**_keys("command"), **_TASK_LIST},
        _parse_shell,
        _run_shell,
        external=True,
        idempotent=False,
    ),
    "signal": StepType(
        _template("${workflow_id} ${name} [ = ${value...} ]", "signal WORKFLOW_ID NAME [= VALUE]"),
        _keys("workflow_id", "value", signal="name"),
        _parse_signal,
        _run_signal,
    ),
    "child": StepType(
        _template("${workflow_type}", "child TYPE"),
        {**_keys("workflow_type", "version"), **_TASK_LIST},
        _parse_child,
        _run_child,
        compound=True,  # with no nested steps: idempotent, as by default
    ),
}

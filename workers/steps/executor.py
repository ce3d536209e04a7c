"""How each step runs: the step loop of a workflow frame, error handling,
retries and replays within the run, and every step type of STEPS.md.

A `Frame` is one list of steps being run: the workflow's own, a nested
`workflow` (own variables), or an inline block (`if`, `switch` case,
`subworkflow`, an error handler) that shares its parent's variables. Every
step start gets a key — the frame's path, the step's index and how many times
it started — used for its activity and timer ids and recorded in a `step`
marker with its resolved input and the variables as at entry, so the state at
any step can be rebuilt from the history.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog

from sdk import retention
from sdk.durations import parse_duration
from workers.builtins import ShellValue, shell_script
from workers.steps import conditions, expressions, retrying, transforms
from workers.steps.budget import Budget
from workers.steps.continuation import Continuation
from workers.steps.errors import FlowSignal, Jump, Replay, Return, StepError
from workers.steps.expressions import ExpressionError
from workers.steps.limits import MAX_FOREACH_ITEMS
from workers.steps.model import (
    COMPOUND_TYPES,
    HTTP_ACTIVITY,
    NON_IDEMPOTENT_TYPES,
    SHELL_ACTIVITY,
    Definition,
    Step,
)
from workers.steps.operations import RunOperations
from workers.steps.runtime import Cancelled, Future, Scheduler, Task, first_of
from workers.steps.scope import StepScope

log = structlog.get_logger("weft.steps")

START = -1  # the replay point before the first step
MAX_STARTS_PER_TASK = 10_000
"""Step starts allowed in one decision task: more, and the steps are looping
without waiting on anything (a handler that jumps back to a step that fails at
once); the run fails instead of its decider spinning for ever."""
_TIMEOUT_KEYS = ("schedule_to_start", "start_to_close", "schedule_to_close", "heartbeat")


@dataclass
class Entry:
    """What a step start recorded: enough to resume it or replay from it."""

    key: str
    variables: dict[str, Any]
    input: dict[str, Any]
    previous_output: Any


class Run:
    """One workflow run being replayed: its definition, input, operations,
    and the records shared by all its frames."""

    def __init__(self, definition: Definition, ops: RunOperations, scheduler: Scheduler) -> None:
        self.definition = definition
        self.ops = ops
        self.scheduler = scheduler
        self.input: dict[str, Any] = {}
        self.step_records: dict[str, dict[str, Any]] = {}
        self.retry_records: dict[str, list[datetime]] = {}
        self.starts = 0
        """Step starts in the decision task being decided (see MAX_STARTS_PER_TASK)."""
        self.automatic_replays: dict[str, int] = {}
        self.generation = 0
        """Counts operator replays in the run: a path they abandoned keeps its locks."""
        self.workflow_lock = ""
        self.budget: Budget | None = None
        """The CPU budget of the decision task being decided, if any."""
        self.continuation: Continuation | None = None
        """Where the run continues as new on its own (set by the interpreter)."""

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> Task:
        return self.scheduler.spawn(coro)

    def idempotent(self, step: Step) -> bool:
        """Brooklyn's rule: the step's own setting, else `idempotent: all`, else
        the type's default; a step with nested steps is idempotent when all of
        them are."""
        if step.idempotent in ("yes", "no"):
            return step.idempotent == "yes"
        if self.definition.idempotent == "all":
            return True
        if step.type in NON_IDEMPOTENT_TYPES:
            return False
        if step.type in COMPOUND_TYPES:
            return all(self.idempotent(child) for child in _children(step))
        return True


def _children(step: Step) -> list[Step]:
    found: list[Step] = []
    for value in step.args.values():
        if isinstance(value, Step):
            found.append(value)
        elif isinstance(value, tuple):
            found.extend(item for item in value if isinstance(item, Step))
    return found


class Frame:
    """A list of steps being run, with its variables and replay points."""

    def __init__(
        self,
        run: Run,
        steps: Sequence[Step],
        path: str,
        *,
        variables: dict[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        parent: Frame | None = None,
        error: dict[str, Any] | None = None,
        replay_from_start: bool = False,
    ) -> None:
        self.run = run
        self.steps = tuple(steps)
        self.path = path
        self.variables: dict[str, Any] = variables if variables is not None else {}
        self.input: Mapping[str, Any] = input if input is not None else {}
        self.parent = parent
        self.error = error
        self.previous_output: Any = parent.previous_output if parent is not None else None
        self.visits: dict[int, int] = {}
        self.entries: dict[int, Entry] = {}
        self.marks: set[int] = {START} if replay_from_start else set()
        self.last_point: int | None = START if replay_from_start else None
        self.initial_variables = copy.deepcopy(self.variables)
        self.current = 0

    # -- the loop -----------------------------------------------------------------------

    async def run_steps(self, start: int = 0, resume: bool = False) -> Any:
        """Run from `start` to the end; a jump to an id outside this frame
        propagates to the enclosing one."""
        index = start
        while 0 <= index < len(self.steps):
            self.current = index
            parking = self.run.continuation
            gate = parking.gate(self, index) if parking is not None and not resume else None
            if gate is not None:
                await gate  # the run continues as new from here; this one waits for its close
            try:
                target = await self.run_step(index, resume=resume)
            except Replay as replay:
                if self.parent is not None and not self.is_workflow_frame:
                    raise
                index, resume = self.resolve_replay(replay)
                continue
            except Jump as jump:
                found = self.index_of(jump.target)
                if found is None:
                    raise
                index, resume = found, False
                continue
            resume = False
            if target is None:
                index += 1
            elif target == "end":
                break
            else:
                found = self.index_of(target)
                if found is None:
                    raise Jump(target)
                index = found
        return self.previous_output

    @property
    def is_workflow_frame(self) -> bool:
        """Whether this frame keeps replay points (the workflow and nested
        workflows do; inline blocks use their workflow's)."""
        return self.parent is None or self.variables is not self.parent.variables

    def index_of(self, target: str) -> int | None:
        lowered = target.lower()
        if lowered == "start":
            return 0
        if lowered == "last":
            return max(self.last_point if self.last_point is not None else START, 0)
        for i, step in enumerate(self.steps):
            if step.id == target or _contains_id(step, target):
                return i
        return None

    async def run_step(
        self, index: int, *, resume: bool = False, check_condition: bool = True
    ) -> str | None:
        """Run one step with its condition, timeout, error handling and output;
        answers where to go next (None: the following step)."""
        step = self.steps[index]
        resumed = self.entries.get(index) if resume else None
        if resumed is None and check_condition and step.condition is not None:
            scope = StepScope(self, self._peek_key(index))
            try:
                met = conditions.check(step.condition, scope)
            except ExpressionError as exc:
                raise StepError("ExpressionError", _msg(exc), step=step.label) from None
            if not met:
                return None
        entry: Entry | None = None
        try:
            # An input that does not resolve is the step's error too, for its on-error.
            entry = self._start(index, step, resumed)
            output, target = await self._body_with_timeout(step, entry)
        except StepError as error:
            if not error.step:
                error.step = step.label
            if not step.on_error or (entry is not None and _runs_nested_workflows(step)):
                # Brooklyn: a nested workflow's `on-error` is each child's own,
                # applied inside it (`_run_nested`), never to the step.
                raise
            key = entry.key if entry is not None else f"{self.path}{index}.{self.visits[index]}"
            output, target = await self.handle_error(step.on_error, error, key)
            if target == "exit":
                target = None
        if entry is None:
            # Handled before the step started: what it has is its handler's.
            self.previous_output = output
            return target or step.next
        if step.has_output:
            scope = StepScope(self, entry.key, entry.input, output=output)
            try:
                output = expressions.interpolate(step.output, scope)
            except ExpressionError as exc:
                raise StepError("ExpressionError", _msg(exc), step=step.label) from None
        self.previous_output = output
        if step.id:
            self.run.step_records[step.id] = {"output": output, "input": entry.input}
        return target or step.next

    def _peek_key(self, index: int) -> str:
        return f"{self.path}{index}.{self.visits.get(index, 0) + 1}"

    def _start(self, index: int, step: Step, resumed: Entry | None) -> Entry:
        """Record the step start: key, replay-point changes, variables as at
        entry (restored when resuming) and resolved input, in a `step` marker."""
        if self.run.budget is not None:
            self.run.budget.check()
        self.run.starts += 1
        if self.run.starts > MAX_STARTS_PER_TASK:
            raise StepError(
                "StepLimit",
                f"more than {MAX_STARTS_PER_TASK} steps started in one decision task"
                " without waiting on anything: the steps loop",
                step=step.label,
            )
        count = self.visits.get(index, 0) + 1
        self.visits[index] = count
        key = f"{self.path}{index}.{count}"
        if resumed is not None:
            self.variables.clear()
            self.variables.update(copy.deepcopy(resumed.variables))
            self.previous_output = resumed.previous_output
            resolved = copy.deepcopy(resumed.input)
        else:
            scope = StepScope(self, key)
            try:
                resolved = expressions.interpolate(dict(step.input), scope)
            except ExpressionError as exc:
                raise StepError("ExpressionError", _msg(exc), step=step.label) from None
        entry = Entry(key, copy.deepcopy(self.variables), resolved, self.previous_output)
        self.entries[index] = entry
        change = self._replay_point(index, step)
        details: dict[str, Any] = {
            "key": key,
            "index": index,
            "type": step.type,
            "input": resolved,
            "variables": entry.variables,
        }
        if step.id:
            details["id"] = step.id
        if step.type == "log":
            message = self._log_message(step, key, resolved)
            if message is not None:
                # The history is where an operator reads what the run logged:
                # the decider logs it only once, when not replaying.
                details["message"] = message
        if resumed is not None:
            details["resumed"] = True
        if change:
            details["replayable"] = change
        self.run.ops.marker("step", details)
        return entry

    def _log_message(self, step: Step, key: str, resolved: dict[str, Any]) -> str | None:
        """A `log` step's message, or None when it does not resolve (the step
        then fails in its body, where `on-error` handles it)."""
        scope = StepScope(self, key, resolved, error=self.error)
        try:
            return str(expressions.interpolate(step.args.get("message", ""), scope))
        except ExpressionError:
            return None

    def _replay_point(self, index: int, step: Step) -> str | None:
        change = step.replayable
        if step.type == "workflow" and step.args.get("setting") == "replayable":
            change = str(step.args.get("replayable") or "")
        owner = self._workflow_frame()
        if change in ("from here", "from here only"):
            if change == "from here only":
                owner.marks.clear()
            point = index if owner is self else owner.current
            owner.marks.add(point)
            owner.last_point = point
        elif change == "reset":
            owner.marks.clear()
            owner.last_point = None
        elif change == "from start":
            owner.marks.add(START)
            owner.last_point = START
        else:
            return None
        return change

    def _workflow_frame(self) -> Frame:
        frame = self
        while not frame.is_workflow_frame and frame.parent is not None:
            frame = frame.parent
        return frame

    # -- replay within the run ------------------------------------------------------------

    def resolve_replay(self, replay: Replay) -> tuple[int, bool]:
        """Where a replay continues: the current step again (resuming) when it
        is idempotent, else the nearest replay point, with its variables."""
        if replay.mode == "resume":
            step = self.steps[self.current]
            if replay.force or self.run.idempotent(step):
                return self.current, True
            return self._replay_from_point(self.last_point, replay.force, step.label)
        target = replay.target or "last"
        if target.lower() == "last":
            return self._replay_from_point(self.last_point, replay.force, "last")
        if target.lower() == "start":
            wanted = 0
        else:
            found = self.index_of(target)
            if found is None:
                raise StepError("ReplayError", f"no step {target!r} to replay from")
            wanted = found
        if replay.force:
            return self._restore(wanted)
        points = [p for p in self.marks if p <= wanted and (p == START or p in self.entries)]
        if not points:
            raise StepError(
                "ReplayError",
                f"cannot replay from {target!r}: no replay point at or before it"
                " (mark one with `replayable: from here`)",
            )
        return self._restore(max(points))

    def _replay_from_point(self, point: int | None, force: bool, what: str) -> tuple[int, bool]:
        if point is None:
            if force:
                return self._restore(START)
            raise StepError(
                "ReplayError",
                f"cannot resume {what}: it is not idempotent and there is no replay point",
            )
        return self._restore(point)

    def _restore(self, point: int) -> tuple[int, bool]:
        if point == START or point not in self.entries:
            self.variables.clear()
            self.variables.update(copy.deepcopy(self.initial_variables))
            return 0, False
        entry = self.entries[point]
        self.variables.clear()
        self.variables.update(copy.deepcopy(entry.variables))
        self.previous_output = entry.previous_output
        return point, False

    # -- errors ---------------------------------------------------------------------------

    async def handle_error(
        self, handlers: Sequence[Step], error: StepError, key: str
    ) -> tuple[Any, str | None]:
        """Run `on-error`: each handler whose condition matches the error, in
        order, until one jumps. No handler matched: the error propagates."""
        doc = error.as_dict()
        block = Frame(
            self.run,
            handlers,
            f"{key}!",
            variables=self.variables,
            input=self.input,
            parent=self,
            error=doc,
        )
        block.previous_output = self.previous_output
        matched = False
        output: Any = self.previous_output
        for index, handler in enumerate(handlers):
            if handler.condition is not None:
                scope = StepScope(block, key, error=doc)
                try:
                    met = conditions.check(handler.condition, scope, default_target=doc)
                except ExpressionError as exc:
                    raise StepError("ExpressionError", _msg(exc), step=handler.label) from None
                if not met:
                    continue
            matched = True
            block.current = index
            # The condition was tested against the error, just above.
            target = await block.run_step(index, check_condition=False)
            output = block.previous_output
            if target is not None:
                return output, target
        if not matched:
            raise error
        return output, None

    # -- step bodies ----------------------------------------------------------------------

    async def _body_with_timeout(self, step: Step, entry: Entry) -> tuple[Any, str | None]:
        if step.timeout is None or (
            _runs_nested_workflows(step) and not step.args.get("has_target")
        ):
            # A nested workflow without a target: its own timeout (in
            # `_run_nested`) is the step's; a fan-out is bounded by both.
            return await self._body(step, entry)
        finished, result = await within(
            self.run, self._body(step, entry), f"{entry.key}:timeout", step.timeout
        )
        if not finished:
            raise StepError("Timeout", f"{step.label} timed out after {_span(step.timeout)}")
        answer: tuple[Any, str | None] = result
        return answer

    async def _body(self, step: Step, entry: Entry) -> tuple[Any, str | None]:
        handler = _BODIES.get(step.type)
        if handler is None:
            raise StepError("Unsupported", f"the {step.type} step is not supported yet")
        scope = StepScope(self, entry.key, entry.input, error=self.error)
        try:
            result: tuple[Any, str | None] = await handler(self, step, entry, scope)
            return result
        except ExpressionError as exc:
            raise StepError("ExpressionError", _msg(exc)) from None
        except retrying.RetrySpecError as exc:
            raise StepError("ExpressionError", str(exc)) from None
        except (ArithmeticError, RecursionError, MemoryError) as exc:
            # A value the body computed itself (a duration, a count) out of
            # range: the step's error like any other, never the decider's.
            raise StepError("ExpressionError", f"{type(exc).__name__}: {exc}") from None


async def within(
    run: Run, work: Coroutine[Any, Any, Any], timer_id: str, limit: timedelta
) -> tuple[bool, Any]:
    """Run `work` racing a durable timer: (True, its result), or (False, None)
    once the timer fires first and `work` is cancelled (which cancels its
    activities and timers)."""
    body = run.spawn(work)
    timer = run.ops.timer(timer_id, limit)
    try:
        winner = await first_of(body.future, timer)
    except Cancelled:
        body.cancel()
        timer.cancel()
        raise
    if winner is timer:
        body.cancel()
        return False, None
    timer.cancel()
    return True, body.future.result()


def _runs_nested_workflows(step: Step) -> bool:
    """A `workflow` step with steps of its own (not `workflow replayable …`)."""
    return step.type == "workflow" and not step.args.get("setting")


async def run_workflow(
    top: Frame, on_error: Sequence[Step], start: int = 0, resume: bool = False
) -> tuple[Any, bool]:
    """Run a workflow's steps under its workflow-level `on-error`: a handled
    error ends the workflow with the handler's output unless the handler
    jumped (the loop continues there) or replayed. Answers the output and
    whether the workflow ended early (a `return`, or a handler that did not
    jump), so that the workflow's `output:` does not apply. A jump to an id
    the workflow does not have raises `Jump`. `start`/`resume`: where an operator's
    replay goes on."""
    while True:
        try:
            return await top.run_steps(start, resume), False
        except Return as done:
            return done.value, True
        except StepError as error:
            if not on_error:
                raise
            try:
                # `workflow` for the run's own handler; a nested workflow's is
                # named after its frame, so its timers and retry counts are its own.
                key = f"{top.path}workflow"
                output, target = await top.handle_error(on_error, error, key)
            except Replay as replay:
                start, resume = top.resolve_replay(replay)
                continue
            except Return as done:
                return done.value, True
            if target is None or target == "exit":
                return output, True
            if target == "end":
                return output, False
            found = top.index_of(target)
            if found is None:
                raise Jump(target) from None
            start, resume = found, False


def _contains_id(step: Step, target: str) -> bool:
    """Whether an inline block of `step` holds a step with this id (a jump to
    it continues at `step`, Brooklyn's lookup through enclosing blocks)."""
    if step.type in ("workflow", "foreach"):
        return False
    return any(child.id == target or _contains_id(child, target) for child in _children(step))


def _msg(exc: Exception) -> str:
    return str(getattr(exc, "message", "") or exc)


def _span(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    return f"{seconds:g}s"


def _duration(value: Any, what: str) -> timedelta:
    if isinstance(value, timedelta):
        return value
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return timedelta(seconds=float(value))
        return parse_duration(str(value))
    except (ValueError, OverflowError) as exc:
        raise StepError("ExpressionError", f"{what}: {exc}") from None


# -- the step types ---------------------------------------------------------------------

Body = Coroutine[Any, Any, tuple[Any, str | None]]


async def _let(frame: Frame, step: Step, entry: Entry, scope: StepScope) -> tuple[Any, str | None]:
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


async def _transform(
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


async def _log(frame: Frame, step: Step, entry: Entry, scope: StepScope) -> tuple[Any, str | None]:
    message = expressions.interpolate(step.args.get("message", ""), scope)
    if not frame.run.ops.replaying:
        level = str(step.args.get("level", "info"))
        getattr(log, level if level in ("debug", "info", "warning", "error") else "info")(
            "step.log", message=message, workflow_id=frame.run.ops.workflow_id, step=step.label
        )
    return frame.previous_output, None


async def _sleep(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    delay = _duration(expressions.interpolate(step.args.get("duration"), scope), "sleep")
    await frame.run.ops.timer(f"{entry.key}:sleep", delay)
    return frame.previous_output, None


async def _wait(frame: Frame, step: Step, entry: Entry, scope: StepScope) -> tuple[Any, str | None]:
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


async def _goto(frame: Frame, step: Step, entry: Entry, scope: StepScope) -> tuple[Any, str | None]:
    target = str(expressions.interpolate(step.args.get("target"), scope))
    return frame.previous_output, target


async def _no_op(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    return frame.previous_output, None


async def _return(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    raise Return(expressions.interpolate(step.args.get("value"), scope))


async def _fail(frame: Frame, step: Step, entry: Entry, scope: StepScope) -> tuple[Any, str | None]:
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


async def _retry(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    spec = retrying.spec_from_args(step.args)
    run = frame.run
    in_handler = frame.error is not None
    key = str(expressions.interpolate(spec.hash, scope)) if spec.hash else _retry_hash(frame, step)
    records = run.retry_records.setdefault(key, [])
    now = run.ops.now
    cause = frame.error
    for limit in spec.limits:
        if retrying.limit_reached(limit, records, now):
            raise StepError("RetriesExceeded", f"retry limit reached ({_limit_text(limit)})", cause)
    if retrying.timed_out(spec.timeout, records, now):
        raise StepError("Timeout", "retry timeout reached", cause)
    wait = retrying.delay(spec.backoff, len(records), _jitter_rand(run, entry.key))
    if wait > timedelta(0):
        await run.ops.timer(f"{entry.key}:backoff", wait)
    records.append(run.ops.now)
    decision = retrying.continuation(spec, in_handler)
    if decision.kind == "goto":
        return frame.previous_output, decision.target
    if decision.kind == "resume":
        raise Replay("resume", force=decision.force)
    raise Replay("from", decision.target, force=decision.force)


def _retry_hash(frame: Frame, step: Step) -> str:
    # The retry step's place without the visit counts of the path (a handler's
    # frame is named after the failing step's visit), so every run of it shares
    # one count; foreach items and fan-out targets keep counts of their own.
    place = _VISITS.sub(r"\1", frame.path)
    return f"{place}{step.index}"


_VISITS = re.compile(r"(\d+)\.\d+")


def _limit_text(limit: retrying.Limit) -> str:
    parts = []
    if limit.count is not None:
        parts.append(str(limit.count))
    if limit.window is not None:
        parts.append(("in " if parts else "") + _span(limit.window))
    return " ".join(parts)


def _jitter_rand(run: Run, key: str) -> float:
    from workers.steps.scope import _util

    value: float = _util(run.ops.now, run.ops.run_id, key)["random"]
    return value


async def _if(frame: Frame, step: Step, entry: Entry, scope: StepScope) -> tuple[Any, str | None]:
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


async def _subworkflow(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    return await _inline(frame, tuple(step.args.get("steps", ())), f"{entry.key}/")


async def _switch(
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


# -- fan-out: foreach and nested workflows ------------------------------------------------


async def _foreach(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    items = _items(expressions.interpolate(args.get("items"), scope))
    body = tuple(args.get("do", ()))
    var, index_var = str(args.get("var", "item")), str(args.get("index_var", "target_index"))
    # A foreach body sees the enclosing variables (each item its own copy).
    frame_for = _item_frames(frame, entry, body, var, index_var, frame.variables, frame.input)
    return await _fan_out(frame, step, items, frame_for, scope)


async def _workflow(
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


# -- external steps: activities on runners -------------------------------------------------


async def _activity(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    payload: Any = entry.input if step.input else None
    return await _schedule(frame, step, entry, scope, str(args["activity_type"]), payload), None


async def _http(frame: Frame, step: Step, entry: Entry, scope: StepScope) -> tuple[Any, str | None]:
    payload = {"url": expressions.interpolate(step.args.get("url"), scope), **entry.input}
    return await _schedule(frame, step, entry, scope, HTTP_ACTIVITY, payload), None


async def _shell(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    # Values travel as the script's arguments, never as its text (no injection).
    template = expressions.pieces(str(step.args.get("command")), scope)
    command, args = shell_script([ShellValue(t) if value else t for t, value in template])
    payload = {"command": command, "args": args, **entry.input}
    return await _schedule(frame, step, entry, scope, SHELL_ACTIVITY, payload), None


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


# -- steps that talk to other workflows -----------------------------------------------------


async def _signal(
    frame: Frame, step: Step, entry: Entry, scope: StepScope
) -> tuple[Any, str | None]:
    args = step.args
    target = str(expressions.interpolate(args.get("workflow_id"), scope))
    name = str(expressions.interpolate(args.get("name"), scope))
    value = expressions.interpolate(args.get("value"), scope)
    await frame.run.ops.signal_workflow(target, name, value)
    return frame.previous_output, None


async def _child(
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


_BODIES: dict[str, Any] = {
    "let": _let,
    "transform": _transform,
    "log": _log,
    "sleep": _sleep,
    "wait": _wait,
    "goto": _goto,
    "label": _no_op,
    "no-op": _no_op,
    "return": _return,
    "fail": _fail,
    "retry": _retry,
    "if": _if,
    "switch": _switch,
    "subworkflow": _subworkflow,
    "foreach": _foreach,
    "workflow": _workflow,
    "activity": _activity,
    "http": _http,
    "shell": _shell,
    "signal": _signal,
    "child": _child,
}


__all__ = ["START", "Entry", "FlowSignal", "Frame", "Run"]

"""How each step runs: the step loop of a workflow frame, error handling,
retries and replays within the run. Each step type's body is in `steptypes`,
next to its parser; the run is handed their table (`Run.types`).

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
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from sdk.durations import parse_duration
from workers.steps import conditions, expressions, retrying
from workers.steps.budget import Budget
from workers.steps.continuation import Continuation
from workers.steps.entry import Entry
from workers.steps.errors import FlowSignal, Jump, Replay, Return, StepError
from workers.steps.expressions import ExpressionError
from workers.steps.model import Definition, Step
from workers.steps.operations import RunOperations
from workers.steps.runtime import Cancelled, Scheduler, Task, first_of
from workers.steps.scope import StepScope

START = -1  # the replay point before the first step
MAX_STARTS_PER_TASK = 10_000
"""Step starts allowed in one decision task: more, and the steps are looping
without waiting on anything (a handler that jumps back to a step that fails at
once); the run fails instead of its decider spinning for ever."""


class Run:
    """One workflow run being replayed: its definition, input, operations,
    and the records shared by all its frames."""

    def __init__(
        self,
        definition: Definition,
        ops: RunOperations,
        scheduler: Scheduler,
        types: Mapping[str, StepTypeShape],
    ) -> None:
        self.definition = definition
        self.types = types
        """Each step type by name, with its body (`steptypes.STEP_TYPES`)."""
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
        step_type = self.types.get(step.type)
        if step_type is None:
            return True
        if not step_type.idempotent:
            return False
        if step_type.compound:
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
            if step.id == target or _contains_id(self.run.types, step, target):
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
                # applied inside it (`steptypes.fanout._run_nested`), never to the step.
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
            # `steptypes.fanout._run_nested`) is the step's; a fan-out is bounded by both.
            return await self._body(step, entry)
        finished, result = await within(
            self.run, self._body(step, entry), f"{entry.key}:timeout", step.timeout
        )
        if not finished:
            raise StepError("Timeout", f"{step.label} timed out after {_span(step.timeout)}")
        answer: tuple[Any, str | None] = result
        return answer

    async def _body(self, step: Step, entry: Entry) -> tuple[Any, str | None]:
        step_type = self.run.types.get(step.type)
        if step_type is None:
            raise StepError("Unsupported", f"the {step.type} step is not supported yet")
        handler = step_type.body
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


def _contains_id(types: Mapping[str, StepTypeShape], step: Step, target: str) -> bool:
    """Whether an inline block of `step` holds a step with this id (a jump to
    it continues at `step`, Brooklyn's lookup through enclosing blocks)."""
    step_type = types.get(step.type)
    if step_type is not None and step_type.own_frame:
        return False
    return any(
        child.id == target or _contains_id(types, child, target) for child in _children(step)
    )


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


Body = Callable[[Frame, Step, Entry, StepScope], Coroutine[Any, Any, tuple[Any, str | None]]]
"""How a step type runs (`steptypes`): its output and where to go next (None:
the following step)."""


class StepTypeShape(Protocol):
    """What the run reads of a step type (`steptypes.StepType`, named here by its
    shape so that this module does not import the step types, which import it)."""

    @property
    def body(self) -> Body: ...
    @property
    def idempotent(self) -> bool: ...
    @property
    def compound(self) -> bool: ...
    @property
    def own_frame(self) -> bool: ...


__all__ = [
    "START",
    "Body",
    "Entry",
    "FlowSignal",
    "Frame",
    "Run",
    "StepTypeShape",
    "run_workflow",
    "within",
]

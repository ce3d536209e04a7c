"""The step-workflow decider: it replays the run's history through the step
interpreter and answers with the decisions of the current task.

The history is cut into the decision tasks that completed. For each, the
events that arrived before its `DeciderStarted` are delivered (activity
results, timers, signals), the steps run until all of them wait on the
history again, and the decisions they make are compared with the ones the
history records for that task: a replay that decides differently raises
`NonDeterminismError` rather than acting on a history it does not match. What the
steps decide after the last `DeciderStarted` is the answer. "Now" is that
task's `DeciderStarted` time, so time-dependent values are the same on every
replay.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from typing import Any

from sdk.decider import Decider, Decision, DecisionTask
from sdk.events import Event
from sdk.replay import check_decisions
from workers.steps import continuation, expressions
from workers.steps import definition as definitions
from workers.steps.budget import Budget, BudgetExceeded
from workers.steps.continuation import Continuation
from workers.steps.errors import Jump, StepError
from workers.steps.executor import Frame, Run, run_workflow, within
from workers.steps.limits import DECIDE_CPU_SECONDS, MIN_TIMER
from workers.steps.model import DEFAULT_VERSION, Definition, Param
from workers.steps.operations import RunOperations
from workers.steps.points import ReplayPoint
from workers.steps.runtime import Cancelled, Future, Scheduler, Task
from workers.steps.scope import StepScope
from workers.steps.steptypes import STEP_TYPES
from workers.steps.steptypes.fanout import lock_name, record_retention

STEP_MARKER = "step"


class StepDecider(Decider):
    """Decides every run whose `WorkflowStarted` carries a step definition, and
    runs of the types in `definitions` (loaded by `weft decider --definitions`).

    `min_timer`: shorter timers are rounded up to it; `cpu_budget`: the CPU
    seconds one decision task may use (0: no budget). See `limits`."""

    def __init__(
        self,
        local: Iterable[Definition] = (),
        *,
        min_timer: timedelta = MIN_TIMER,
        cpu_budget: float = DECIDE_CPU_SECONDS,
    ) -> None:
        self.local = {(d.name, d.version): d for d in local}
        self.min_timer = min_timer
        self.cpu_budget = cpu_budget

    def definition_for(self, history: Sequence[Event]) -> Definition:
        if not history or history[0].type != "WorkflowStarted":
            raise StepError("InvalidHistory", "the history does not start with WorkflowStarted")
        started = history[0]
        source = str(started.get("definition") or "")
        if source:
            return _parse(source)
        kind = started.get("workflow_type") or {}
        name, version = str(kind.get("name", "")), str(kind.get("version", ""))
        found = self.local.get((name, version)) or self.local.get((name, DEFAULT_VERSION))
        if found is None:
            raise StepError(
                "UnknownWorkflowType", f"no step definition for {name!r} version {version!r}"
            )
        return found

    def decide(self, task: DecisionTask) -> None:
        try:
            definition = self.definition_for(task.history)
        except definitions.DefinitionError as exc:
            # The snapshot came from a client that skipped the parser (`weft
            # register` checks it): no decider will ever read it, so fail the
            # run instead of failing its decision tasks forever.
            task.fail("InvalidDefinition", {"type": "InvalidDefinition", "message": str(exc)})
            return
        budget = Budget(self.cpu_budget) if self.cpu_budget > 0 else None
        try:
            decisions = replay(
                definition,
                task.history,
                task.started_event_id,
                task.run_id,
                task.workflow_id,
                min_timer=self.min_timer,
                budget=budget,
                continue_suggested=task.continue_as_new_suggested,
            )
        except BudgetExceeded as exc:
            # The run fails, with why: failing only the decision task would have
            # the next decider spend the same time on it, for ever.
            reason = "DecisionBudgetExceeded"
            task.fail(reason, {"type": reason, "message": str(exc)})
            return
        task.decisions.extend(decisions)


@lru_cache(maxsize=256)
def _parse(source: str) -> Definition:
    return definitions.parse(source, "<snapshot>")


@dataclass
class _Batch:
    started: Event
    events: list[Event]
    completed_id: int | None


def _batches(history: Sequence[Event], started_event_id: int) -> list[_Batch]:
    """The decision tasks that completed, and the current one, each with the
    events delivered before it."""
    completed = {
        int(e.get("started_event_id", 0)): e.event_id
        for e in history
        if e.type == "DeciderCompleted"
    }
    batches: list[_Batch] = []
    pending: list[Event] = []
    for event in history:
        if event.type == "DeciderStarted" and (
            event.event_id in completed or event.event_id == started_event_id
        ):
            batches.append(_Batch(event, pending, completed.get(event.event_id)))
            pending = []
        else:
            pending.append(event)
    return batches


def replay(
    definition: Definition,
    history: Sequence[Event],
    started_event_id: int,
    run_id: str = "",
    workflow_id: str = "",
    *,
    min_timer: timedelta = MIN_TIMER,
    budget: Budget | None = None,
    continue_suggested: bool = False,
) -> list[Decision]:
    """The decisions of the task whose `DeciderStarted` is `started_event_id`;
    raises `NonDeterminismError` if an earlier task's recorded decisions differ,
    `BudgetExceeded` if `budget` runs out. `continue_suggested`: the service
    suggests that this task continue the run as new (`continuation.py`)."""
    interpreter = Interpreter(definition, workflow_id, run_id, min_timer=min_timer)
    interpreter.run.budget = budget
    answer: list[Decision] = []
    for batch in _batches(history, started_event_id):
        current = batch.started.event_id == started_event_id
        due = continue_suggested if current else continuation.recorded(history, batch.completed_id)
        commands = interpreter.advance(
            batch.events, batch.started, replaying=not current, continue_due=due
        )
        if current:
            answer = commands
        elif batch.completed_id is not None:
            _check(commands, history, batch.completed_id, min_timer)
    return answer


def check_history(
    definition: Definition,
    history: Sequence[Event],
    run_id: str = "",
    workflow_id: str = "",
    *,
    min_timer: timedelta = MIN_TIMER,
) -> None:
    """Replay a whole recorded history and check every decision task's
    decisions against it: the determinism test of the suite."""
    interpreter = Interpreter(definition, workflow_id, run_id, min_timer=min_timer)
    for batch in _batches(history, -1):
        if batch.completed_id is not None and _over_budget(history, batch.completed_id):
            # The decider ran out of CPU time there: a replay cannot know it would.
            return
        due = continuation.recorded(history, batch.completed_id)
        commands = interpreter.advance(
            batch.events, batch.started, replaying=True, continue_due=due
        )
        if batch.completed_id is not None:
            _check(commands, history, batch.completed_id, min_timer)


def _over_budget(history: Sequence[Event], completed_id: int) -> bool:
    """Whether the task that completed at `completed_id` failed the run for its budget."""
    return any(
        e.type == "WorkflowFailed"
        and e.get("decider_completed_event_id") == completed_id
        and e.get("reason") == "DecisionBudgetExceeded"
        for e in history
    )


def _check(
    commands: list[Decision], history: Sequence[Event], completed_id: int, min_timer: timedelta
) -> None:
    recorded = [e for e in history if e.get("decider_completed_event_id") == completed_id]
    # Deep: the step markers, timer durations and the outcome must match too.
    check_decisions(
        _floored_as_recorded(commands, recorded, min_timer), recorded, completed_id, deep=True
    )


def _floored_as_recorded(
    commands: list[Decision], recorded: list[Event], min_timer: timedelta
) -> list[Decision]:
    """`commands`, with a timer at or under the floor taken as the one the history
    records when that is at or under the floor too: a run recorded before the
    floor existed (or with another floor) replays instead of failing as
    non-deterministic. Only sleeps that short are affected; longer ones must
    match exactly."""
    out = list(commands)
    for i, (command, event) in enumerate(zip(commands, recorded, strict=False)):
        if command.kind != "StartTimer" or event.type != "TimerScheduled":
            continue
        made, seconds = command.attributes.get("delay"), event.get("start_to_fire_timeout")
        if not isinstance(made, timedelta) or seconds is None:
            continue
        kept = timedelta(seconds=float(seconds))
        if made != kept and made <= min_timer and kept <= min_timer:
            out[i] = Decision(command.kind, {**command.attributes, "delay": kept})
    return out


class Interpreter:
    """The steps of one run, advanced decision task by decision task."""

    def __init__(
        self,
        definition: Definition,
        workflow_id: str,
        run_id: str,
        *,
        min_timer: timedelta = MIN_TIMER,
    ) -> None:
        self.definition = definition
        self.ops = RunOperations(workflow_id, run_id, min_timer)
        self.scheduler = Scheduler()
        self.run = Run(definition, self.ops, self.scheduler, STEP_TYPES)
        self.main: Task | None = None
        self.close: Decision | None = None
        self.top: Frame | None = None
        """The workflow's frame as it stands (the latest, after a replay)."""
        self.given: Any = None
        self.began = False
        self.workflow_lock: Future | None = None
        self.continuation = Continuation(self.run, definition.continue_as_new_after)
        self.run.continuation = self.continuation
        self.carried: dict[str, Any] | None = None
        """What the run this one continues carried over (None: a fresh start)."""

    def advance(
        self, events: list[Event], started: Event, *, replaying: bool, continue_due: bool = False
    ) -> list[Decision]:
        """The decisions of one decision task; `continue_due`: it continues the
        run as new at its first safe point (`continuation.py`)."""
        ops = self.ops
        ops.now = started.timestamp
        ops.replaying = replaying
        self.continuation.suggested = continue_due
        self.continuation.events = started.event_id
        self.run.starts = 0
        budget = self.run.budget
        for event in events:
            if budget is not None:
                budget.check()
            if event.type == "WorkflowStarted":
                self._start(event)
            elif event.type == "WorkflowCancelRequested" and self.main is not None:
                self.main.cancel()
            elif event.type == "ReplayRequested":
                self._replay(event)
            else:
                ops.deliver(event)
        self.scheduler.run()
        if budget is not None and budget.exceeded:
            # Raised inside a step, it may have ended in a future nobody awaits.
            budget.check()
        commands = ops.take_commands()
        if self.main is not None and self.main.done:
            commands.append(self._close_decision(self.main))
        elif self.continuation.parked is not None:
            commands.append(self.continuation.decision())
        return commands

    def _start(self, event: Event) -> None:
        if not self.ops.workflow_id:
            self.ops.workflow_id = str(event.get("workflow_id", ""))
        self.given = event.get("input")
        self.continuation.started_at = event.timestamp
        # (A replay of a closed continued run starts from that run's input too.)
        continued = bool(event.get("continued_from_run_id") or event.get("replay_of_run_id"))
        self.carried = continuation.carried(self.given) if continued else None
        if self.carried is not None:
            # Before any event of this run: the old run's signals are older.
            held = [
                str(lock.get("lock_name", ""))
                for lock in event.get("carried_locks") or ()
                if lock.get("held")
            ]
            self.ops.take_over(self.carried.get("signals") or {}, held)
            self.given = self.carried.get("input")
        self.main = self.scheduler.spawn(self._main(self.given))

    def _replay(self, event: Event) -> None:
        """An operator's replay (`weft replay`): abandon what runs (its activities and
        timers get their cancel decisions) and go on from the point the request
        carries, resolved from this history by `workers.steps.replay.resolve`. The
        new path's steps are keyed apart (`r<event id>/…`), so nothing of the
        abandoned one can answer them."""
        self.run.generation += 1
        self.ops.abandon_locks(keep=self.run.workflow_lock)
        if self.main is not None:
            self.main.cancel()
        try:
            point = ReplayPoint.from_json(event.get("point"))
        except StepError as error:
            # A request from a client that skipped `resolve`: the run fails
            # with the reason rather than its decision tasks failing for ever.
            self.main = self.scheduler.spawn(_raise(error))
            return
        self.main = self.scheduler.spawn(
            self._main(self.given, point=point, prefix=f"r{event.event_id}/")
        )

    # -- the workflow -------------------------------------------------------------------

    async def _main(self, given: Any, point: ReplayPoint | None = None, prefix: str = "") -> Any:
        definition = self.definition
        self.run.input = _workflow_input(definition, given)
        top = self.top = Frame(
            self.run,
            definition.steps,
            prefix,
            input=self.run.input,
            replay_from_start=definition.replayable == "from start",
        )
        scope = StepScope(top, "workflow")
        first, self.began = not self.began, True
        self.continuation.top = top
        carried = self.carried if first else None
        if carried is not None:
            # (Its retention, too, came with it: the service carries that.)
            start_at = continuation.restore(carried, self.continuation, top)
        elif first and definition.retention:
            record_retention(self.run, definition.retention, scope)
        if definition.lock:
            # Held until the run closes (the service releases it with the close):
            # the timeout starts once it is held, and on-error runs with it. A
            # replay in the run keeps it.
            name = self.run.workflow_lock = lock_name(definition.lock, scope)
            if name not in self.ops.held:
                if self.workflow_lock is None:
                    self.workflow_lock = self.ops.lock(name)
                # Waited on through a stand-in: a replay abandons the wait, not the request.
                await _follow(self.workflow_lock)
        start, resume = point.apply(top) if point is not None else (0, False)
        if carried is not None and point is None:
            start = start_at  # (an operator's replay goes where it says)
        if definition.timeout is None:
            return await self._steps(top, start, resume)
        limit = definition.timeout
        left = self.continuation.deadline
        if carried is not None and left is not None:
            limit = max(left - self.ops.now, timedelta(0))  # what the old run had left
        self.continuation.deadline = self.ops.now + limit
        finished, result = await within(
            self.run,
            self._steps(top, start, resume),
            f"{prefix}workflow:timeout",
            limit,
        )
        if not finished:
            # Brooklyn: a workflow timeout skips the workflow's on-error (which
            # runs inside `_steps`, cancelled by now).
            raise StepError("Timeout", f"the workflow timed out after {definition.timeout}")
        return result

    async def _steps(self, top: Frame, start: int = 0, resume: bool = False) -> Any:
        definition = self.definition
        try:
            output, ended = await run_workflow(top, definition.on_error, start, resume)
        except Jump as jump:
            raise StepError("StepNotFound", f"no step with id {jump.target!r}") from None
        if ended:
            return output
        if definition.has_output:
            scope = StepScope(top, "workflow", output=output)
            try:
                return expressions.interpolate(definition.output, scope)
            except expressions.ExpressionError as exc:
                raise StepError("ExpressionError", str(getattr(exc, "message", exc))) from None
        return output

    def _close_decision(self, main: Task) -> Decision:
        error = main.future.error
        if error is None:
            return Decision("CompleteWorkflow", {"result": main.future.result()})
        if isinstance(error, Cancelled):
            return Decision("CancelWorkflow", {"details": None})
        if isinstance(error, StepError):
            return Decision("FailWorkflow", {"reason": error.type, "details": error.as_dict()})
        # A defect of the interpreter: fail the decision task, not the workflow,
        # so a fixed decider can still carry the run on.
        raise error


async def _raise(error: StepError) -> Any:
    raise error


def _follow(future: Future) -> Future:
    """A future that settles as `future` does; cancelling it leaves `future` be."""
    stand_in = Future()

    def settle() -> None:
        if future.error is not None:
            stand_in.set_error(future.error)
        else:
            stand_in.set_result(future.result())

    future.add_callback(settle)
    return stand_in


def _workflow_input(definition: Definition, given: Any) -> dict[str, Any]:
    """The definition's `input` defaults, the parameters' defaults, then what
    the start gave; parameters are checked and typed."""
    if given is not None and not isinstance(given, Mapping):
        raise StepError("InvalidInput", "the workflow input must be a JSON object")
    merged: dict[str, Any] = copy.deepcopy(dict(definition.input))
    for param in definition.parameters:
        if param.has_default:
            merged.setdefault(param.name, copy.deepcopy(param.default))
    merged.update(given or {})
    for param in definition.parameters:
        _check_param(param, merged)
    return merged


def _check_param(param: Param, values: dict[str, Any]) -> None:
    if param.name not in values or values[param.name] is None:
        if param.required:
            raise StepError("InvalidInput", f"parameter {param.name!r} is required")
        return
    if param.type:
        try:
            values[param.name] = expressions.coerce(param.type, values[param.name])
        except expressions.ExpressionError as exc:
            message = str(getattr(exc, "message", exc))
            raise StepError("InvalidInput", f"parameter {param.name!r}: {message}") from None

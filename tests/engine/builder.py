"""A small fluent history builder for pure engine tests (no database, no server).

`Run` drives one workflow run through engine commands the way the store does:
a new `Transition(state, now)` per command, run by the engine's one entry
point, `transition.apply`. The clock is a fixed, tz-aware UTC
datetime that only moves when a test advances it.

Each command runs on a copy of the state and the copy is adopted only if the
command succeeds, as a rolled-back database transaction would leave the stored
state untouched. The last transition is kept in `run.last` (also when the
command raised) so that a test can check that a refused command appended
nothing and changed nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from orchestrator.engine import activity, derived, external, locks
from orchestrator.engine.decisions import (
    DecisionContext,
    complete_decision_task,
    fail_decision_task,
    start_decision_task,
)
from orchestrator.engine.limits import Limits
from orchestrator.engine.start import StartCommand, start_workflow
from orchestrator.engine.state import ActivityState, RunKey, RunState
from orchestrator.engine.timeouts import fire_deadline
from orchestrator.engine.tokens import TaskToken
from orchestrator.engine.transition import Transition, apply, duration
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h

T = TypeVar("T")

T0 = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
KEY = RunKey("ns", "wf-1", "run-1")
TASK_LIST = "deciders"
DECIDER_TIMEOUT = 10.0
EXECUTION_TIMEOUT = 3600.0


def payload(text: str) -> c.Payload:
    return c.Payload(data=f'"{text}"'.encode(), encoding="json")


# --- decisions --------------------------------------------------------------


def schedule_activity(
    activity_id: str,
    *,
    name: str = "work",
    task_list: str = "",
    schedule_to_start: float | None = None,
    start_to_close: float | None = None,
    schedule_to_close: float | None = None,
    heartbeat: float | None = None,
) -> d.Decision:
    a = d.ScheduleActivityDecision(
        activity_id=activity_id,
        activity_type=c.ActivityType(name=name, version="1"),
        task_list=task_list,
        input=payload(activity_id),
    )
    for field_name, value in (
        ("schedule_to_start_timeout", schedule_to_start),
        ("start_to_close_timeout", start_to_close),
        ("schedule_to_close_timeout", schedule_to_close),
        ("heartbeat_timeout", heartbeat),
    ):
        if value is not None:
            getattr(a, field_name).CopyFrom(duration(value))
    return d.Decision(schedule_activity=a)


def cancel_activity(activity_id: str) -> d.Decision:
    return d.Decision(
        request_cancel_activity=d.RequestCancelActivityDecision(activity_id=activity_id)
    )


def start_timer(timer_id: str, seconds: float | None = 60.0) -> d.Decision:
    a = d.StartTimerDecision(timer_id=timer_id)
    if seconds is not None:
        a.start_to_fire_timeout.CopyFrom(duration(seconds))
    return d.Decision(start_timer=a)


def cancel_timer(timer_id: str) -> d.Decision:
    return d.Decision(cancel_timer=d.CancelTimerDecision(timer_id=timer_id))


def marker(name: str) -> d.Decision:
    return d.Decision(record_marker=d.RecordMarkerDecision(marker_name=name, details=payload(name)))


def complete_workflow(result: str = "done") -> d.Decision:
    return d.Decision(complete_workflow=d.CompleteWorkflowDecision(result=payload(result)))


def fail_workflow(reason: str = "boom") -> d.Decision:
    return d.Decision(fail_workflow=d.FailWorkflowDecision(reason=reason))


def cancel_workflow() -> d.Decision:
    return d.Decision(cancel_workflow=d.CancelWorkflowDecision())


def continue_as_new(input_text: str = "next", carried_locks: tuple[str, ...] = ()) -> d.Decision:
    return d.Decision(
        continue_as_new=d.ContinueAsNewDecision(
            input=payload(input_text), carried_locks=carried_locks
        )
    )


def request_lock(lock_name: str) -> d.Decision:
    return d.Decision(request_lock=d.RequestLockDecision(lock_name=lock_name))


def release_lock(lock_name: str) -> d.Decision:
    return d.Decision(release_lock=d.ReleaseLockDecision(lock_name=lock_name))


def start_child(
    workflow_id: str,
    *,
    name: str = "sub",
    version: str = "",
    task_list: str = "",
    policy: d.ParentClosePolicy.ValueType = d.PARENT_CLOSE_POLICY_UNSPECIFIED,
    execution_timeout: float | None = None,
    decider_timeout: float | None = None,
    input_text: str | None = None,
) -> d.Decision:
    a = d.StartChildWorkflowDecision(
        workflow_id=workflow_id,
        workflow_type=c.WorkflowType(name=name, version=version),
        task_list=task_list,
        parent_close_policy=policy,
    )
    if input_text is not None:
        a.input.CopyFrom(payload(input_text))
    if execution_timeout is not None:
        a.execution_timeout.CopyFrom(duration(execution_timeout))
    if decider_timeout is not None:
        a.decider_timeout.CopyFrom(duration(decider_timeout))
    return d.Decision(start_child_workflow=a)


def signal_external(workflow_id: str, signal_name: str = "note", run_id: str = "") -> d.Decision:
    return d.Decision(
        signal_external_workflow=d.SignalExternalWorkflowDecision(
            execution=c.WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            signal_name=signal_name,
            input=payload(signal_name),
        )
    )


# --- the run ------------------------------------------------------------------


class Run:
    """One run driven command by command; `history` is everything appended so far."""

    def __init__(
        self,
        key: RunKey = KEY,
        now: datetime = T0,
        ctx: DecisionContext | None = None,
    ) -> None:
        self.key = key
        self.now = now
        self.ctx = ctx or DecisionContext(new_run_id="run-2")
        self.state = RunState.blank(key)
        self.history: list[h.HistoryEvent] = []
        self.new_runs: list[Transition] = []
        self.last: Transition | None = None
        self.snapshots: list[tuple[int, RunState]] = []
        """(history length, a copy of the state) after every command that succeeded."""
        self.armed: dict[tuple[str, int], float] = {}
        """Every deadline ever armed, with the due time it was first armed with."""

    @classmethod
    def opened(cls, t: Transition, ctx: DecisionContext | None = None) -> Run:
        """The run another command opened (`t` from its `new_runs`: a child, the
        run a continue-as-new goes on in), to drive on from its first events."""
        run = cls(t.state.key, t.now, ctx)
        run.state = copy.deepcopy(t.state)
        run.history = list(t.events)
        return run

    # the one way a command runs (engine.transition.apply, as in the store)
    def apply(self, fn: Callable[[Transition], T]) -> T:
        t = Transition(copy.deepcopy(self.state), self.now)
        self.last = t
        result = apply(t, fn)
        self.state = t.state
        self.history.extend(t.events)
        self.new_runs.extend(t.new_runs)
        self.snapshots.append((len(self.history), copy.deepcopy(t.state)))
        for deadline, due in derived.deadlines(t.state).items():
            self.armed.setdefault(deadline, due)
        return result

    # clock
    def advance(self, seconds: float) -> Run:
        self.now += timedelta(seconds=seconds)
        return self

    def at(self, epoch_seconds: float) -> Run:
        self.now = datetime.fromtimestamp(epoch_seconds, tz=UTC)
        return self

    # views
    @property
    def types(self) -> list[str]:
        return [e.type for e in self.history]

    @property
    def last_types(self) -> list[str]:
        """The event types the last command appended."""
        assert self.last is not None
        return [e.type for e in self.last.events]

    def event(self, event_id: int) -> h.HistoryEvent:
        e = self.history[event_id - 1]
        assert e.event_id == event_id
        return e

    def tasks(self) -> set[derived.TaskRef]:
        return derived.tasks(self.state)

    def decision_tasks(self) -> list[int]:
        return sorted(t.scheduled_id for t in self.tasks() if t.kind == derived.DECISION)

    def activity_tasks(self) -> list[int]:
        return sorted(t.scheduled_id for t in self.tasks() if t.kind == derived.ACTIVITY)

    def deadlines(self) -> dict[tuple[str, int], float]:
        return derived.deadlines(self.state)

    def activity(self, activity_id: str) -> ActivityState:
        return self.state.activities[activity_id]

    # commands
    def start(
        self,
        *,
        task_list: str = TASK_LIST,
        execution_timeout: float = EXECUTION_TIMEOUT,
        decider_timeout: float = DECIDER_TIMEOUT,
        continued_from_run_id: str = "",
        definition: str = "",
    ) -> Run:
        cmd = StartCommand(
            type_name="flow",
            type_version="1",
            task_list=task_list,
            input=payload("in"),
            execution_timeout=execution_timeout,
            decider_timeout=decider_timeout,
            identity="starter",
            continued_from_run_id=continued_from_run_id,
            definition=definition,
        )
        self.apply(lambda t: start_workflow(t, cmd))
        return self

    def poll_decision(
        self, scheduled_id: int | None = None, identity: str = "decider"
    ) -> TaskToken:
        """Take a decision task (the outstanding DeciderScheduled unless told)."""
        d = self.state.decider
        # A retried attempt is handed out on the task that failed, unless one is queued.
        queued = d.scheduled_id or (d.started_scheduled_id if d.retry_pending else 0)
        sid = queued if scheduled_id is None else scheduled_id
        started = self.apply(lambda t: start_decision_task(t, sid, identity))
        return TaskToken(self.key, "decision", sid, started, self.state.decider.attempt)

    def decide(
        self, token: TaskToken, *decisions: d.Decision, ctx: DecisionContext | None = None
    ) -> Run:
        context = ctx or self.ctx
        self.apply(lambda t: complete_decision_task(t, token, decisions, "decider", context))
        return self

    def fail_decision(self, token: TaskToken, cause: str = "UNHANDLED_FAILURE") -> Run:
        self.apply(lambda t: fail_decision_task(t, token, cause, None, "decider"))
        return self

    def step(self, *decisions: d.Decision) -> Run:
        """Poll the outstanding decision task and answer it at once."""
        return self.decide(self.poll_decision(), *decisions)

    def poll_activity(self, activity_id: str, identity: str = "runner") -> TaskToken:
        sid = self.state.activities[activity_id].scheduled_id
        self.apply(lambda t: activity.start_activity_task(t, sid, identity))
        started = self.state.activities[activity_id].started_id
        return TaskToken(self.key, "activity", sid, started)

    def activity_done(self, token: TaskToken, result: str = "ok") -> Run:
        self.apply(lambda t: activity.complete(t, token, payload(result), "runner"))
        return self

    def activity_failed(self, token: TaskToken, reason: str = "bad") -> Run:
        self.apply(lambda t: activity.fail(t, token, reason, None, False, "runner"))
        return self

    def activity_canceled(self, token: TaskToken) -> Run:
        self.apply(lambda t: activity.canceled(t, token, None, "runner"))
        return self

    def heartbeat(self, token: TaskToken, details: str | None = None) -> bool:
        body = payload(details) if details is not None else None
        return self.apply(lambda t: activity.heartbeat(t, token, body))

    def signal(self, name: str = "sig", limits: Limits | None = None) -> Run:
        lim = limits or Limits()
        self.apply(lambda t: external.signal(t, name, payload(name), "sender", lim))
        return self

    def request_cancel(self) -> Run:
        self.apply(lambda t: external.request_cancel(t, "please", "operator"))
        return self

    def terminate(self) -> Run:
        self.apply(lambda t: external.terminate(t, "stop", None, "operator"))
        return self

    def grant(
        self, lock_name: str, previous_workflow_id: str = "", previous_run_id: str = ""
    ) -> Run:
        """The store found the lock free and this run first in its queue."""
        self.apply(lambda t: locks.grant(t, lock_name, previous_workflow_id, previous_run_id))
        return self

    def force_release(
        self, lock_name: str, identity: str = "operator", reason: str = "stuck"
    ) -> Run:
        self.apply(lambda t: locks.force_release(t, lock_name, identity, reason))
        return self

    def fire(self, kind: str, ref_id: int) -> bool:
        return self.apply(lambda t: fire_deadline(t, kind, ref_id))

    def fire_when_due(self, kind: str, ref_id: int) -> bool:
        """Move the clock to the deadline's due time, then fire it."""
        self.at(self.deadlines()[(kind, ref_id)])
        return self.fire(kind, ref_id)

    # checks
    def assert_refused_cleanly(self) -> None:
        """The last command raised, appended nothing and left the state as it was."""
        assert self.last is not None
        assert [e.type for e in self.last.events] == []
        assert self.last.state.to_json() == self.state.to_json()

    def assert_contiguous(self) -> None:
        assert [e.event_id for e in self.history] == list(range(1, len(self.history) + 1))
        assert self.history[0].type == "WorkflowStarted"


def started(**kwargs: Any) -> Run:
    """A run just started: WorkflowStarted, DeciderScheduled."""
    return Run().start(**kwargs)

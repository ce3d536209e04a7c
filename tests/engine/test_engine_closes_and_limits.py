"""Applying a decider's answer: close rules (invariant 1) and limits (CONTRACT.md
"Decisions", "Limits"). Decision failures and validation are in test_engine_decisions.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator.engine import derived, external, locks
from orchestrator.engine.activity import start_activity_task
from orchestrator.engine.context import DecisionContext
from orchestrator.engine.errors import FailedPrecondition, ResourceExhausted
from orchestrator.engine.events import fold
from orchestrator.engine.limits import Limits
from orchestrator.engine.tokens import TaskToken
from orchestrator.engine.transition import duration
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h

from .builder import (
    TASK_LIST,
    Run,
    cancel_activity,
    cancel_timer,
    cancel_workflow,
    complete_workflow,
    continue_as_new,
    fail_workflow,
    marker,
    payload,
    schedule_activity,
    start_timer,
    started,
)
from .decider_turns import decider_turn

# --- 9. close rules -------------------------------------------------------------


def _busy() -> tuple[Run, TaskToken, TaskToken]:
    """A run with a started activity, a pending one, a timer and a started decision task."""
    run = started()
    run.step(
        schedule_activity("a", start_to_close=60, heartbeat=10, schedule_to_close=600),
        schedule_activity("b", schedule_to_start=30),
        start_timer("t", 30),
    )
    activity = run.poll_activity("a")
    run.signal()
    decision = run.poll_decision()
    assert run.tasks()
    assert len(run.deadlines()) > 1
    return run, activity, decision


CLOSERS: list[tuple[str, Callable[[Run, TaskToken], object], str, str]] = [
    ("complete", lambda r, tok: r.decide(tok, complete_workflow()), "WorkflowSuccess", "completed"),
    ("fail", lambda r, tok: r.decide(tok, fail_workflow()), "WorkflowFailed", "failed"),
    ("cancel", lambda r, tok: r.decide(tok, cancel_workflow()), "WorkflowCanceled", "canceled"),
    (
        "continue-as-new",
        lambda r, tok: r.decide(tok, continue_as_new()),
        "WorkflowContinuedAsNew",
        "continued_as_new",
    ),
    ("terminate", lambda r, tok: r.terminate(), "WorkflowTerminated", "terminated"),
    (
        "timeout",
        lambda r, tok: r.fire_when_due(derived.WORKFLOW_TIMEOUT, 1),
        "WorkflowTimedOut",
        "timed_out",
    ),
]


@pytest.mark.parametrize(
    ("close", "close_event", "status"),
    [row[1:] for row in CLOSERS],
    ids=[row[0] for row in CLOSERS],
)
def test_nothing_is_appended_after_a_close_event(
    close: Callable[[Run, TaskToken], object], close_event: str, status: str
) -> None:
    run, activity, decision = _busy()
    close(run, decision)
    assert run.history[-1].type == close_event
    assert run.state.status == status
    assert not run.state.is_open
    # Pending work is abandoned with the run.
    assert run.tasks() == set()
    assert run.deadlines() == {}
    assert run.state.activities == {}
    assert run.state.timers == {}
    assert not run.state.decider.scheduled_id
    assert not run.state.decider.started_id
    run.assert_contiguous()

    length = len(run.history)
    commands: list[Callable[[Run], object]] = [
        lambda r: r.signal(),
        lambda r: r.request_cancel(),
        lambda r: r.terminate(),
        lambda r: r.decide(decision, marker("late")),
        lambda r: r.fail_decision(decision),
        lambda r: r.poll_decision(2),
        lambda r: r.activity_done(activity),
        lambda r: r.activity_failed(activity),
        lambda r: r.activity_canceled(activity),
        lambda r: r.heartbeat(activity),
        lambda r: r.apply(lambda t: start_activity_task(t, activity.scheduled_id, "runner")),
    ]
    for command in commands:
        with pytest.raises(FailedPrecondition):
            command(run)
        run.assert_refused_cleanly()

    # Deadlines armed before the close are stale now.
    for kind, ref in [
        (derived.WORKFLOW_TIMEOUT, 1),
        (derived.ACTIVITY_START_TO_CLOSE, activity.started_id),
        (derived.ACTIVITY_HEARTBEAT, activity.started_id),
        (derived.DECIDER_START_TO_CLOSE, decision.started_id),
    ]:
        run.advance(10_000)
        assert run.fire(kind, ref) is False
        assert run.last_types == []

    # The engine itself refuses to append after a close.
    with pytest.raises(AssertionError):
        run.apply(lambda t: t.emit(h.SignalAttributes(signal_name="sneaky")))
    with pytest.raises(AssertionError):
        run.apply(lambda t: t.emit(h.DeciderScheduledAttributes(task_list=TASK_LIST)))
    # finish() does not reschedule a closed run even when asked to.
    run.apply(lambda t: t.wake_decider())
    assert run.last_types == []
    assert len(run.history) == length


def test_close_decision_abandons_pending_work_and_stays_last() -> None:
    run, _activity, decision = _busy()
    run.decide(decision, schedule_activity("c"), start_timer("t2", 5), complete_workflow())
    assert run.last_types == [
        "DeciderCompleted",
        "ActivityScheduled",
        "TimerScheduled",
        "WorkflowSuccess",
    ]
    assert run.tasks() == set()
    assert run.deadlines() == {}


def test_request_cancel_is_recorded_once() -> None:
    run = started()
    run.step()
    run.request_cancel()
    assert run.last_types == ["WorkflowCancelRequested", "DeciderScheduled"]
    run.request_cancel()
    assert run.last_types == []
    assert run.state.cancel_requested
    run.step(cancel_workflow())
    assert run.state.status == "canceled"


def test_continue_as_new_opens_a_successor() -> None:
    ctx = DecisionContext(new_run_id="run-next")
    run = Run(ctx=ctx).start(execution_timeout=7200, decider_timeout=15)
    token = run.poll_decision()
    run.decide(token, schedule_activity("a"), continue_as_new("carry"))
    closed = run.history[-1]
    assert closed.type == "WorkflowContinuedAsNew"
    cont = closed.workflow_continued_as_new
    assert cont.new_run_id == "run-next"
    assert cont.workflow_type.name == "flow"
    assert cont.task_list == TASK_LIST
    assert cont.decider_completed_event_id == run.history[-3].event_id
    assert run.state.status == "continued_as_new"
    assert run.state.continued_as_new_run_id == "run-next"
    assert run.tasks() == set()

    assert len(run.new_runs) == 1
    nxt = run.new_runs[0]
    assert nxt.state.key.run_id == "run-next"
    assert nxt.state.key.workflow_id == run.key.workflow_id
    assert [e.type for e in nxt.events] == ["WorkflowStarted", "DeciderScheduled"]
    assert [e.event_id for e in nxt.events] == [1, 2]
    ws = nxt.events[0].workflow_started
    assert ws.continued_from_run_id == run.key.run_id
    assert ws.input == payload("carry")
    assert ws.task_list == TASK_LIST
    assert ws.workflow_type.name == "flow"
    assert ws.execution_timeout.ToTimedelta().total_seconds() == 7200
    assert ws.decider_timeout.ToTimedelta().total_seconds() == 15
    assert nxt.state.is_open
    assert nxt.state.continued_from_run_id == run.key.run_id
    assert nxt.state.activities == {}
    assert derived.tasks(nxt.state) == {derived.TaskRef(derived.DECISION, TASK_LIST, 2)}


def test_continue_as_new_may_change_type_task_list_and_timeouts() -> None:
    run = started()
    decision = continue_as_new()
    a = decision.continue_as_new
    a.workflow_type.name, a.workflow_type.version = "other", "2"
    a.task_list = "elsewhere"
    a.decider_timeout.CopyFrom(duration(3))
    run.step(decision)
    ws = run.new_runs[0].events[0].workflow_started
    assert (ws.workflow_type.name, ws.workflow_type.version) == ("other", "2")
    assert ws.task_list == "elsewhere"
    assert ws.decider_timeout.ToTimedelta().total_seconds() == 3
    assert run.new_runs[0].events[1].decider_scheduled.task_list == "elsewhere"


# --- 10. limits -----------------------------------------------------------------

LIMITS = [
    # id, limits, setup decisions, decisions over the limit, decisions at the limit
    (
        "activities-across-tasks",
        Limits(pending_activities=2),
        [schedule_activity("a"), schedule_activity("b")],
        [schedule_activity("c")],
        [marker("m")],
    ),
    (
        "activities-one-batch",
        Limits(pending_activities=2),
        [],
        [schedule_activity("a"), schedule_activity("b"), schedule_activity("c")],
        [schedule_activity("a"), schedule_activity("b")],
    ),
    (
        "timers-across-tasks",
        Limits(pending_timers=1),
        [start_timer("t1")],
        [start_timer("t2")],
        [cancel_timer("t1")],
    ),
    (
        "timers-one-batch",
        Limits(pending_timers=2),
        [],
        [start_timer("t1"), start_timer("t2"), start_timer("t3")],
        [start_timer("t1"), start_timer("t2")],
    ),
    (
        "events-per-run",
        Limits(events_per_run=11),
        [marker("m1"), marker("m2")],
        [marker("m3")],
        [complete_workflow()],
    ),
]


@pytest.mark.parametrize(
    ("limits", "setup", "over", "within"),
    [row[1:] for row in LIMITS],
    ids=[row[0] for row in LIMITS],
)
def test_decisions_over_a_limit_are_refused_and_append_nothing(
    limits: Limits,
    setup: list[d.Decision],
    over: list[d.Decision],
    within: list[d.Decision],
) -> None:
    run = Run(ctx=DecisionContext(limits=limits, new_run_id="run-2")).start()
    run.step(*setup)
    token = decider_turn(run)
    with pytest.raises(ResourceExhausted):
        run.decide(token, *over)
    run.assert_refused_cleanly()
    # The same task may still answer within the limit.
    run.decide(token, *within)
    assert run.last_types[0] == "DeciderCompleted"


def test_signals_over_the_limit_are_refused_and_append_nothing() -> None:
    limits = Limits(signals_per_run=2)
    run = started()
    run.signal("1", limits=limits)
    run.signal("2", limits=limits)
    assert run.state.signals == 2
    with pytest.raises(ResourceExhausted):
        run.signal("3", limits=limits)
    run.assert_refused_cleanly()
    assert run.types.count("Signal") == 2


def test_signals_over_the_event_limit_are_refused() -> None:
    run = started()
    with pytest.raises(ResourceExhausted):
        run.signal("x", limits=Limits(events_per_run=2))
    run.assert_refused_cleanly()
    run.signal("y", limits=Limits(events_per_run=3))
    assert run.last_types == ["Signal"]  # a decision task is already outstanding


def test_a_cancel_request_is_not_counted_as_a_signal() -> None:
    limits = Limits(signals_per_run=0)
    run = started()
    run.apply(lambda t: external.request_cancel(t, "r", "op"))
    with pytest.raises(ResourceExhausted):
        run.signal("s", limits=limits)
    run.assert_refused_cleanly()


@pytest.mark.parametrize(
    "failing",
    [schedule_activity("a"), cancel_activity("nope"), cancel_timer("nope")],
    ids=["duplicate-activity", "unknown-activity-cancel", "unknown-timer-cancel"],
)
def test_a_close_after_a_failed_decision_of_the_same_batch_is_refused(
    failing: d.Decision,
) -> None:
    run = started()
    run.step(schedule_activity("a"))
    token = decider_turn(run)
    run.decide(token, failing, complete_workflow())
    failure = run.last_types[1]
    assert run.last_types == [
        "DeciderCompleted",
        failure,
        "WorkflowCloseFailed",
        "DeciderScheduled",
    ]
    assert run.last.events[2].workflow_close_failed.cause == "UNHANDLED_EVENTS"  # type: ignore[union-attr]
    assert run.state.is_open
    assert run.decision_tasks()  # the decider gets to see the failure


def test_cancelling_pending_work_then_closing_in_one_batch_closes() -> None:
    """What the batch itself causes (ActivityCanceled) is not an unseen event."""
    run = started()
    run.step(schedule_activity("a"))
    token = decider_turn(run)
    run.decide(token, cancel_activity("a"), complete_workflow())
    assert run.last_types == [
        "DeciderCompleted",
        "ActivityCancelRequested",
        "ActivityCanceled",
        "WorkflowSuccess",
    ]
    assert not run.state.is_open


def test_continue_as_new_carries_locks_into_the_new_runs_state() -> None:
    run = started()
    run.step(
        d.Decision(request_lock=d.RequestLockDecision(lock_name="held")),
        d.Decision(request_lock=d.RequestLockDecision(lock_name="queued")),
        d.Decision(request_lock=d.RequestLockDecision(lock_name="dropped")),
    )
    run.advance(5)
    run.apply(lambda t: locks.grant(t, "held", "", ""))
    acquired_at = run.state.locks["held"].acquired_at
    requested_at = run.state.locks["queued"].requested_at
    run.advance(5)
    decision = continue_as_new()
    decision.continue_as_new.carried_locks.extend(["queued", "held", "held"])
    run.step(decision)
    closed = run.history[-1].workflow_continued_as_new
    assert [(c.lock_name, c.held) for c in closed.carried_locks] == [
        ("queued", False),
        ("held", True),
    ]
    assert run.state.locks == {}  # the old run holds nothing: the close let go of "dropped"
    assert "LockReleased" not in run.types
    nxt = run.new_runs[0]
    assert list(nxt.events[0].workflow_started.carried_locks) == list(closed.carried_locks)
    held, queued = nxt.state.locks["held"], nxt.state.locks["queued"]
    assert (held.requested_id, held.acquired_id, held.acquired_at) == (1, 1, acquired_at)
    assert (queued.acquired_id, queued.requested_at) == (0, requested_at)
    assert set(nxt.state.locks) == {"held", "queued"}
    assert fold(nxt.state.key, nxt.events).folded_part() == nxt.state.folded_part()


def test_continue_as_new_carrying_a_lock_it_does_not_have_fails_the_close() -> None:
    run = started()
    run.step(d.Decision(request_lock=d.RequestLockDecision(lock_name="mine")))
    decision = continue_as_new()
    decision.continue_as_new.carried_locks.append("yours")
    run.signal()
    run.step(decision)
    assert run.last_types[-2:] == ["WorkflowCloseFailed", "DeciderScheduled"]
    failed = run.history[-2].workflow_close_failed
    assert (failed.decision_type, failed.cause) == ("ContinueAsNew", "LOCK_NOT_HELD")
    assert run.state.is_open and "mine" in run.state.locks
    assert run.new_runs == []

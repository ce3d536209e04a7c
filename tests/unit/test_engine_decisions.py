"""Applying a decider's answer: decision failures, cancels, validation, close
rules (invariant 1) and limits (CONTRACT.md "Decisions", "Limits")."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator.engine import derived, external, locks
from orchestrator.engine.activity import start_activity_task
from orchestrator.engine.context import DecisionContext
from orchestrator.engine.decisions import validate_decisions
from orchestrator.engine.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
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


def decider_turn(run: Run) -> TaskToken:
    """Take a decision task, scheduling one with a signal if none is outstanding."""
    if not run.state.decider.scheduled_id:
        run.signal("wake")
    return run.poll_decision()


# --- 6. decision failures -----------------------------------------------------


def _expire_timer(run: Run) -> None:
    run.step(start_timer("t", 5))
    assert run.fire_when_due(derived.TIMER, run.state.timers["t"].started_id)


def _complete_activity(run: Run) -> None:
    run.step(schedule_activity("a"))
    run.activity_done(run.poll_activity("a"))


FAILURES = [
    # id, setup, decisions, appended after DeciderCompleted, (attribute field, cause)
    (
        "duplicate-activity-pending",
        lambda r: r.step(schedule_activity("a")),
        [schedule_activity("a")],
        ["ActivityScheduleFailed", "DeciderScheduled"],
        ("activity_schedule_failed", "DUPLICATE_ACTIVITY_ID"),
    ),
    (
        "duplicate-activity-same-batch",
        lambda r: None,
        [schedule_activity("a"), schedule_activity("a")],
        ["ActivityScheduled", "ActivityScheduleFailed", "DeciderScheduled"],
        ("activity_schedule_failed", "DUPLICATE_ACTIVITY_ID"),
    ),
    (
        "timer-id-in-use",
        lambda r: r.step(start_timer("t")),
        [start_timer("t")],
        ["TimerScheduleFailed", "DeciderScheduled"],
        ("timer_schedule_failed", "TIMER_ID_ALREADY_IN_USE"),
    ),
    (
        "timer-id-in-use-same-batch",
        lambda r: None,
        [start_timer("t"), start_timer("t")],
        ["TimerScheduled", "TimerScheduleFailed", "DeciderScheduled"],
        ("timer_schedule_failed", "TIMER_ID_ALREADY_IN_USE"),
    ),
    (
        "cancel-expired-timer",
        _expire_timer,
        [cancel_timer("t")],
        ["TimerCancelFailed", "DeciderScheduled"],
        ("timer_cancel_failed", "TIMER_ID_UNKNOWN"),
    ),
    (
        "cancel-unknown-timer",
        lambda r: None,
        [cancel_timer("never")],
        ["TimerCancelFailed", "DeciderScheduled"],
        ("timer_cancel_failed", "TIMER_ID_UNKNOWN"),
    ),
    (
        "cancel-unknown-activity",
        lambda r: None,
        [cancel_activity("never")],
        ["ActivityCancelFailed", "DeciderScheduled"],
        ("activity_cancel_failed", "ACTIVITY_ID_UNKNOWN"),
    ),
    (
        "cancel-completed-activity",
        _complete_activity,
        [cancel_activity("a")],
        ["ActivityCancelFailed", "DeciderScheduled"],
        ("activity_cancel_failed", "ACTIVITY_ID_UNKNOWN"),
    ),
]


@pytest.mark.parametrize(
    ("setup", "decisions", "appended", "failure"),
    [row[1:] for row in FAILURES],
    ids=[row[0] for row in FAILURES],
)
def test_decision_failures(
    setup: Callable[[Run], object],
    decisions: list[d.Decision],
    appended: list[str],
    failure: tuple[str, str],
) -> None:
    run = started()
    setup(run)
    before_activities = set(run.state.activities)
    before_timers = {k: v.started_id for k, v in run.state.timers.items()}
    token = decider_turn(run)
    run.decide(token, *decisions)
    assert run.last_types == ["DeciderCompleted", *appended]
    completed_id = run.last.events[0].event_id  # type: ignore[union-attr]
    field_name, cause = failure
    assert run.last is not None
    failed = [e for e in run.last.events if e.WhichOneof("attributes") == field_name]
    assert len(failed) == 1
    attrs = getattr(failed[0], field_name)
    assert attrs.cause == cause
    assert attrs.decider_completed_event_id == completed_id
    # The failed decision changed nothing it was aimed at.
    if field_name == "timer_schedule_failed":
        assert run.state.timers["t"].started_id == before_timers.get("t", completed_id + 1)
    if field_name == "activity_schedule_failed":
        assert set(run.state.activities) == before_activities | {"a"}


def test_an_activity_id_may_be_reused_once_the_activity_ended() -> None:
    run = started()
    _complete_activity(run)
    run.step(schedule_activity("a"))
    assert run.last_types == ["DeciderCompleted", "ActivityScheduled"]


def test_a_timer_id_may_be_reused_once_the_timer_was_canceled() -> None:
    run = started()
    run.step(start_timer("t", 30))
    first = run.state.timers["t"].started_id
    run.signal()
    run.step(cancel_timer("t"), start_timer("t", 60))
    assert run.last_types == ["DeciderCompleted", "TimerCanceled", "TimerScheduled"]
    assert run.last.events[1].timer_canceled.started_event_id == first  # type: ignore[union-attr]
    assert run.state.timers["t"].started_id == run.history[-1].event_id
    assert (derived.TIMER, first) not in run.deadlines()


def test_cancel_of_a_not_started_activity_cancels_it_at_once() -> None:
    run = started()
    run.step(schedule_activity("a", schedule_to_start=30, schedule_to_close=300))
    scheduled = run.activity("a").scheduled_id
    assert run.activity_tasks() == [scheduled]
    run.signal()
    run.step(cancel_activity("a"))
    assert run.last_types == [
        "DeciderCompleted",
        "ActivityCancelRequested",
        "ActivityCanceled",
        "DeciderScheduled",
    ]
    requested, canceled = run.history[-3], run.history[-2]
    assert requested.activity_cancel_requested.activity_id == "a"
    assert canceled.activity_canceled.scheduled_event_id == scheduled
    assert canceled.activity_canceled.latest_cancel_requested_event_id == requested.event_id
    assert "a" not in run.state.activities
    assert run.activity_tasks() == []
    assert not [k for k in run.deadlines() if k[1] == scheduled]
    with pytest.raises(NotFound):
        run.apply(lambda t: start_activity_task(t, scheduled, "runner"))
    run.assert_refused_cleanly()


def test_cancel_of_a_started_activity_asks_the_runner() -> None:
    run = started()
    run.step(schedule_activity("a", start_to_close=60))
    token = run.poll_activity("a")
    assert run.heartbeat(token) is False
    run.signal()
    run.step(cancel_activity("a"))
    assert run.last_types == ["DeciderCompleted", "ActivityCancelRequested"]
    requested = run.history[-1].event_id
    assert run.activity("a").cancel_requested_id == requested
    # Still running until the runner answers; its deadlines stay armed.
    assert (derived.ACTIVITY_START_TO_CLOSE, token.started_id) in run.deadlines()
    assert run.heartbeat(token, "stopping") is True
    assert run.last_types == []

    run.activity_canceled(token)
    assert run.last_types == ["ActivityCanceled", "DeciderScheduled"]
    canceled = run.history[-2].activity_canceled
    assert canceled.latest_cancel_requested_event_id == requested
    assert canceled.started_event_id == token.started_id
    assert "a" not in run.state.activities


def test_the_runner_may_still_complete_an_activity_whose_cancel_was_requested() -> None:
    run = started()
    run.step(schedule_activity("a"))
    token = run.poll_activity("a")
    run.signal()
    run.step(cancel_activity("a"))
    run.activity_done(token)
    assert run.last_types == ["ActivitySuccess", "DeciderScheduled"]
    with pytest.raises(NotFound):
        run.activity_canceled(token)
    run.assert_refused_cleanly()


ACTIVITY_ANSWERS: dict[str, Callable[[Run, TaskToken], object]] = {
    "complete": lambda r, tok: r.activity_done(tok),
    "fail": lambda r, tok: r.activity_failed(tok),
    "canceled": lambda r, tok: r.activity_canceled(tok),
    "heartbeat": lambda r, tok: r.heartbeat(tok),
}


@pytest.mark.parametrize("answer", list(ACTIVITY_ANSWERS.values()), ids=list(ACTIVITY_ANSWERS))
@pytest.mark.parametrize(
    "forge",
    [
        lambda tok: TaskToken(tok.key, "activity", tok.scheduled_id, tok.started_id + 1),
        lambda tok: TaskToken(tok.key, "activity", tok.scheduled_id, tok.started_id - 1),
        lambda tok: TaskToken(tok.key, "activity", tok.scheduled_id + 1, tok.started_id),
    ],
    ids=["later-started", "earlier-started", "other-scheduled"],
)
def test_an_activity_answer_for_another_attempt_is_refused(
    answer: Callable[[Run, TaskToken], object], forge: Callable[[TaskToken], TaskToken]
) -> None:
    run = started()
    run.step(schedule_activity("a"), schedule_activity("b"))
    token = run.poll_activity("a")
    with pytest.raises(NotFound):
        answer(run, forge(token))
    run.assert_refused_cleanly()
    run.activity_done(token)
    assert run.last_types == ["ActivitySuccess", "DeciderScheduled"]


def test_schedule_activity_fills_defaults() -> None:
    run = started()
    run.step(schedule_activity("a"), schedule_activity("b", task_list="gpu", start_to_close=7))
    a = run.history[-2].activity_scheduled
    b = run.history[-1].activity_scheduled
    assert a.task_list == TASK_LIST
    assert a.start_to_close_timeout.ToTimedelta().total_seconds() == 300.0
    assert not a.HasField("schedule_to_start_timeout")
    assert not a.HasField("heartbeat_timeout")
    assert b.task_list == "gpu"
    assert b.start_to_close_timeout.ToTimedelta().total_seconds() == 7.0


# --- 7. validation --------------------------------------------------------------


def _with(decision: d.Decision, mutate: Callable[[d.Decision], object]) -> d.Decision:
    mutate(decision)
    return decision


INVALID = [
    ("close-not-last", [complete_workflow(), marker("m")]),
    ("close-then-activity", [fail_workflow(), schedule_activity("a")]),
    ("two-closes", [cancel_workflow(), complete_workflow()]),
    ("continue-as-new-not-last", [continue_as_new(), start_timer("t")]),
    ("empty-decision", [d.Decision()]),
    ("empty-decision-after-valid", [marker("m"), d.Decision()]),
    ("activity-without-id", [schedule_activity("")]),
    (
        "activity-without-type",
        [_with(schedule_activity("a"), lambda x: x.schedule_activity.ClearField("activity_type"))],
    ),
    ("timer-without-id", [start_timer("")]),
    ("timer-without-duration", [start_timer("t", None)]),
    ("cancel-timer-without-id", [cancel_timer("")]),
    ("cancel-activity-without-id", [cancel_activity("")]),
    ("marker-without-name", [marker("")]),
    ("negative-schedule-to-start", [schedule_activity("a", schedule_to_start=-1)]),
    ("negative-start-to-close", [schedule_activity("a", start_to_close=-0.5)]),
    ("negative-schedule-to-close", [schedule_activity("a", schedule_to_close=-60)]),
    ("negative-heartbeat", [schedule_activity("a", heartbeat=-1)]),
    ("negative-timer", [start_timer("t", -1)]),
    (
        "negative-continue-as-new-timeout",
        [
            _with(
                continue_as_new(),
                lambda x: x.continue_as_new.execution_timeout.CopyFrom(duration(-5)),
            )
        ],
    ),
    # A zero timeout would expire the moment it starts (a zero timer fires at once: valid).
    ("zero-schedule-to-start", [schedule_activity("a", schedule_to_start=0)]),
    ("zero-heartbeat", [schedule_activity("a", heartbeat=0)]),
    (
        "zero-continue-as-new-decider-timeout",
        [
            _with(
                continue_as_new(),
                lambda x: x.continue_as_new.decider_timeout.CopyFrom(duration(0)),
            )
        ],
    ),
    ("id-too-long", [schedule_activity("x" * 1001)]),
    ("invalid-after-valid", [schedule_activity("ok"), start_timer("t", -1)]),
]


@pytest.mark.parametrize("decisions", [row[1] for row in INVALID], ids=[row[0] for row in INVALID])
def test_validate_decisions_refuses(decisions: list[d.Decision]) -> None:
    with pytest.raises(InvalidArgument):
        validate_decisions(decisions, Limits())


@pytest.mark.parametrize("decisions", [row[1] for row in INVALID], ids=[row[0] for row in INVALID])
def test_an_invalid_answer_changes_nothing(decisions: list[d.Decision]) -> None:
    run = started()
    run.step(start_timer("keep", 30))
    token = decider_turn(run)
    history_before = list(run.history)
    with pytest.raises(InvalidArgument):
        run.decide(token, *decisions)
    run.assert_refused_cleanly()
    assert run.history == history_before
    # The task is still the decider's: a corrected answer is accepted.
    run.decide(token, marker("fixed"))
    assert run.last_types == ["DeciderCompleted", "Marker"]


VALID = [
    ("none", []),
    ("close-last", [marker("m"), schedule_activity("a"), complete_workflow()]),
    ("zero-timer", [start_timer("t", 0)]),
    ("id-at-limit", [schedule_activity("x" * 1000)]),
    ("each-kind", [cancel_activity("a"), cancel_timer("t"), continue_as_new()]),
]


@pytest.mark.parametrize("decisions", [row[1] for row in VALID], ids=[row[0] for row in VALID])
def test_validate_decisions_accepts(decisions: list[d.Decision]) -> None:
    validate_decisions(decisions, Limits())


def test_id_length_limit_is_configurable() -> None:
    with pytest.raises(InvalidArgument):
        validate_decisions([start_timer("abcdef")], Limits(id_length=5))
    validate_decisions([start_timer("abcde")], Limits(id_length=5))


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

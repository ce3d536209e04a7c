"""Applying a decider's answer: decision failures, cancels and validation
(CONTRACT.md "Decisions"). Close rules and limits are in test_engine_closes_and_limits.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator.engine import derived
from orchestrator.engine.activity import start_activity_task
from orchestrator.engine.decisions import validate_decisions
from orchestrator.engine.errors import InvalidArgument, NotFound
from orchestrator.engine.limits import Limits
from orchestrator.engine.tokens import TaskToken
from orchestrator.engine.transition import duration
from sdk.api.weft.v1 import decisions_pb2 as d

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
    schedule_activity,
    start_timer,
    started,
)
from .decider_turns import decider_turn

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

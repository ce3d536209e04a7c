"""`DecisionTask`'s reading side: the views folded from a history built with
`HistoryBuilder` (the decision builders are in test_unit_decision_builders.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sdk import DecisionTask
from sdk.history import Failure
from sdk.testing import HistoryBuilder, task_for

Steps = Callable[[HistoryBuilder], HistoryBuilder]


def base() -> HistoryBuilder:
    """Event 1 WorkflowStarted, 2-3 a decision task, 4 DeciderCompleted."""
    return HistoryBuilder().started({"order": 7}, workflow_type="order").decision_task()


def with_activity(steps: Steps = lambda b: b) -> DecisionTask:
    b = base().decision_completed().activity_scheduled("a", "resize", {"n": 1})
    return task_for(steps(b).decision_task().events)


# -- reading -----------------------------------------------------------------------------


def test_first_task_input_history_and_ids() -> None:
    b = base()
    task = task_for(b.events)
    assert task.input == {"order": 7}
    assert [e.type for e in task.history] == [
        "WorkflowStarted",
        "DeciderScheduled",
        "DeciderStarted",
    ]
    assert task.started_event_id == 3
    assert task.previous_started_event_id == 0
    assert task.is_first is True
    assert [e.event_id for e in task.new_events] == [1, 2, 3]
    assert task.workflow_type == "order"
    assert task.decisions == []
    assert task.closed is False


def test_second_task_new_events_window() -> None:
    b = base().decision_completed().activity_scheduled("a", "resize").signal("go")
    b.decision_task()  # events 7, 8
    task = task_for(b.events)
    assert task.started_event_id == 8
    assert task.previous_started_event_id == 3
    assert task.is_first is False
    assert [(e.event_id, e.type) for e in task.new_events] == [
        (4, "DeciderCompleted"),
        (5, "ActivityScheduled"),
        (6, "Signal"),
        (7, "DeciderScheduled"),
        (8, "DeciderStarted"),
    ]
    assert len(task.history) == 8


def test_history_stops_at_the_chosen_decider_started() -> None:
    b = base().decision_completed().signal("late").decision_task()
    task = task_for(b.events, 3)
    assert [e.event_id for e in task.history] == [1, 2, 3]
    assert task.signals() == []


F = Failure
ACTIVITY_CASES: list[tuple[str, Steps, str, Any, Failure | None]] = [
    ("scheduled", lambda b: b, "scheduled", None, None),
    ("started", lambda b: b.activity_started("a", "runner-7"), "started", None, None),
    (
        "succeeded",
        lambda b: b.activity_started("a").activity_succeeded("a", {"ok": True}),
        "succeeded",
        {"ok": True},
        None,
    ),
    (
        "failed",
        lambda b: b.activity_started("a").activity_failed(
            "a", "ValueError", {"message": "bad input"}, non_retryable=True
        ),
        "failed",
        None,
        F("ValueError", {"message": "bad input"}, True),
    ),
    (
        "failed-plain",
        lambda b: b.activity_started("a").activity_failed("a", "Boom"),
        "failed",
        None,
        F("Boom", None, False),
    ),
    (
        "start-to-close",
        lambda b: b.activity_started("a").activity_timed_out("a"),
        "timed_out",
        None,
        F("START_TO_CLOSE"),
    ),
    (
        "heartbeat",
        lambda b: b.activity_started("a").activity_timed_out("a", "HEARTBEAT", {"step": 3}),
        "timed_out",
        None,
        F("HEARTBEAT", {"step": 3}),
    ),
    (
        "schedule-to-close",
        lambda b: b.activity_timed_out("a", "SCHEDULE_TO_CLOSE"),
        "timed_out",
        None,
        F("SCHEDULE_TO_CLOSE"),
    ),
    (
        "schedule-to-start",
        lambda b: b.activity_schedule_timed_out("a"),
        "timed_out",
        None,
        F("SCHEDULE_TO_START"),
    ),
    (
        "cancel-requested",
        lambda b: b.activity_started("a").activity_cancel_requested("a"),
        "cancel_requested",
        None,
        None,
    ),
    (
        "canceled",
        lambda b: (
            b.activity_started("a").activity_cancel_requested("a").activity_canceled("a", {"at": 2})
        ),
        "canceled",
        None,
        F("Canceled", {"at": 2}),
    ),
]


@pytest.mark.parametrize(
    ("steps", "status", "result", "failure"),
    [c[1:] for c in ACTIVITY_CASES],
    ids=[c[0] for c in ACTIVITY_CASES],
)
def test_activity_status(steps: Steps, status: str, result: Any, failure: Failure | None) -> None:
    task = with_activity(steps)
    act = task.activities["a"]
    assert act.activity_id == "a"
    assert act.activity_type == "resize"
    assert act.status == status
    assert act.result == result
    assert act.failure == failure
    assert act.attempts == 1
    assert act.input == {"n": 1}
    assert act.scheduled_event_id == 5
    assert act.is_open is (status in ("scheduled", "started", "cancel_requested"))
    assert [a.activity_id for a in task.open_activities] == (["a"] if act.is_open else [])


def test_started_records_identity_and_event() -> None:
    act = with_activity(lambda b: b.activity_started("a", "runner-7")).activities["a"]
    assert (act.identity, act.started_event_id, act.task_list) == ("runner-7", 6, "default")


@pytest.mark.parametrize(
    ("details", "message"),
    [
        ({"message": "bad input"}, "bad input"),
        ({"message": 3}, "Boom"),
        ("text", "Boom"),
        (None, "Boom"),
    ],
)
def test_failure_message(details: Any, message: str) -> None:
    act = with_activity(lambda b: b.activity_failed("a", "Boom", details)).activities["a"]
    assert act.failure is not None
    assert act.failure.message == message


def test_retry_after_failure_counts_attempts_and_resets() -> None:
    def steps(b: HistoryBuilder) -> HistoryBuilder:
        b.activity_started("a").activity_failed("a", "Boom", {"message": "x"})
        b.decision_task().decision_completed().activity_scheduled("a", "resize", {"n": 2})
        return b

    act = with_activity(steps).activities["a"]
    assert (act.status, act.attempts, act.result, act.failure) == ("scheduled", 2, None, None)
    assert act.input == {"n": 2}
    assert act.started_event_id == 0


def test_retry_after_success_resets_result_and_third_attempt_succeeds() -> None:
    def steps(b: HistoryBuilder) -> HistoryBuilder:
        b.activity_started("a").activity_succeeded("a", 1)
        b.decision_task().decision_completed().activity_scheduled("a", "resize")
        b.activity_timed_out("a", "SCHEDULE_TO_CLOSE")
        b.decision_task().decision_completed().activity_scheduled("a", "resize")
        return b.activity_started("a").activity_succeeded("a", 3)

    act = with_activity(steps).activities["a"]
    assert (act.status, act.attempts, act.result, act.failure) == ("succeeded", 3, 3, None)


def test_late_event_of_an_earlier_attempt_is_ignored() -> None:
    def steps(b: HistoryBuilder) -> HistoryBuilder:
        b.activity_started("a").activity_timed_out("a")
        b.decision_task().decision_completed().activity_scheduled("a", "resize")
        return b.add("ActivitySuccess", scheduled_event_id=5, started_event_id=6, result="stale")

    act = with_activity(steps).activities["a"]
    assert (act.status, act.attempts, act.result) == ("scheduled", 2, None)


def test_schedule_failed_duplicate_leaves_open_attempt_untouched() -> None:
    def steps(b: HistoryBuilder) -> HistoryBuilder:
        b.activity_started("a", "r1")
        return b.activity_schedule_failed("a", "resize", "DUPLICATE_ACTIVITY_ID")

    act = with_activity(steps).activities["a"]
    assert (act.status, act.attempts, act.failure, act.identity) == ("started", 1, None, "r1")


def test_schedule_failed_of_unknown_id_is_a_failed_activity() -> None:
    b = base().decision_completed().activity_schedule_failed("z", "nope", "LIMIT_EXCEEDED")
    act = task_for(b.decision_task().events).activities["z"]
    assert (act.status, act.activity_type, act.attempts) == ("failed", "nope", 0)
    assert act.failure == Failure("LIMIT_EXCEEDED")


def test_schedule_failed_after_success_drops_earlier_result() -> None:
    def steps(b: HistoryBuilder) -> HistoryBuilder:
        b.activity_started("a").activity_succeeded("a", {"old": True})
        b.decision_task().decision_completed()
        return b.activity_schedule_failed("a", "resize", "LIMIT_EXCEEDED")

    act = with_activity(steps).activities["a"]
    assert act.status == "failed"
    assert act.result is None


def test_open_activities_in_schedule_order() -> None:
    b = base().decision_completed()
    for act_id in ("c", "a", "b", "d"):
        b.activity_scheduled(act_id, "t")
    b.activity_started("a").activity_succeeded("b", 1).activity_started("d")
    task = task_for(b.decision_task().events)
    assert [a.activity_id for a in task.open_activities] == ["c", "a", "d"]
    assert {k: v.status for k, v in task.activities.items()} == {
        "c": "scheduled",
        "a": "started",
        "b": "succeeded",
        "d": "started",
    }


@pytest.mark.parametrize(
    ("steps", "status"),
    [
        (lambda b: b, "started"),
        (lambda b: b.timer_fired("t1"), "fired"),
        (lambda b: b.timer_canceled("t1"), "canceled"),
        (lambda b: b.timer_schedule_failed("t1"), "started"),  # duplicate of the running one
    ],
    ids=["started", "fired", "canceled", "duplicate"],
)
def test_timer_status(steps: Steps, status: str) -> None:
    b = base().decision_completed().timer_started("t1", timedelta(minutes=5))
    timer = task_for(steps(b).decision_task().events).timers["t1"]
    assert (timer.timer_id, timer.status, timer.delay, timer.started_event_id) == (
        "t1",
        status,
        300.0,
        5,
    )


def test_restarted_timer_ignores_the_old_expiry() -> None:
    b = base().decision_completed().timer_started("t1", timedelta(seconds=1)).timer_fired("t1")
    b.decision_task().decision_completed().timer_started("t1", timedelta(seconds=2))
    b.add("TimerExpired", timer_id="t1", started_event_id=5)
    timer = task_for(b.decision_task().events).timers["t1"]
    assert (timer.status, timer.delay, timer.started_event_id) == ("started", 2.0, 10)


def test_signals_markers_and_cancel_request() -> None:
    b = base().signal("approved", {"by": "ann"}, identity="ops").signal("note", "hi")
    b.signal("approved", {"by": "bob"}).marker("m", {"v": 1}).marker("other").marker("m", 2)
    task = task_for(b.decision_task().events)
    assert [(s.name, s.input, s.event_id) for s in task.signals()] == [
        ("approved", {"by": "ann"}, 4),
        ("note", "hi", 5),
        ("approved", {"by": "bob"}, 6),
    ]
    approved = task.signals("approved")
    assert [s.input for s in approved] == [{"by": "ann"}, {"by": "bob"}]
    assert approved[0].identity == "ops"
    assert approved[0].timestamp == datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC)
    assert task.signals("missing") == []
    assert [(m.details, m.event_id) for m in task.markers("m")] == [({"v": 1}, 7), (2, 9)]
    assert [m.name for m in task.markers()] == ["m", "other", "m"]
    assert task.cancel_requested is False
    assert task_for(b.cancel_requested("stop").decision_task().events).cancel_requested is True


def test_locks_view_follows_request_grant_and_release() -> None:
    b = base().decision_completed()
    b.add("LockRequested", lock_name="a").add("LockRequested", lock_name="b")
    b.add("LockRequested", lock_name="c").add("LockAcquired", lock_name="a")
    b.add("RequestLockFailed", lock_name="a", cause="LOCK_ALREADY_HELD")  # a duplicate
    b.add("RequestLockFailed", lock_name="z", cause="LOCK_NAME_INVALID")
    b.add("LockReleased", lock_name="b", was_waiting=True)
    b.add("LockAcquired", lock_name="c")
    b.add("LockReleased", lock_name="c", forced=True, identity="ops@host")
    locks = task_for(b.decision_task().events).locks
    assert {n: lk.status for n, lk in locks.items()} == {
        "a": "held",
        "b": "released",
        "c": "released",
        "z": "failed",
    }
    assert locks["a"].held and locks["a"].requested_event_id == 5
    assert (locks["c"].forced, locks["c"].released_by) == (True, "ops@host")
    assert not locks["b"].forced
    assert locks["z"].failure is not None and locks["z"].failure.reason == "LOCK_NAME_INVALID"

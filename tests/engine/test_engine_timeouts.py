"""Deadlines falling due (CONTRACT.md "Timeouts and defaults"): every kind fires
its event and reschedules the decider where the contract says; stale or early
deadlines are no-ops; answers after a timeout are refused."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from orchestrator.engine import derived
from orchestrator.engine.activity import start_activity_task
from orchestrator.engine.errors import FailedPrecondition, NotFound
from orchestrator.engine.tokens import TaskToken
from sdk.api.weft.v1 import history_pb2 as h

from .builder import (
    DECIDER_TIMEOUT,
    EXECUTION_TIMEOUT,
    T0,
    Run,
    cancel_timer,
    complete_workflow,
    payload,
    schedule_activity,
    start_timer,
    started,
)

EPOCH0 = T0.timestamp()


@dataclass
class Case:
    """A run set up so that one deadline is pending; `ref` finds its reference id."""

    setup: Callable[[Run], object]
    kind: str
    ref: Callable[[Run], int]
    due_after: float
    """Seconds after T0 the deadline is due."""
    appended: list[str]
    check: Callable[[Run, h.HistoryEvent], object]


def _activity(run: Run, activity_id: str = "a") -> tuple[int, int]:
    act = run.activity(activity_id)
    return act.scheduled_id, act.started_id


def _schedule(**timeouts: Any) -> Callable[[Run], object]:
    def go(run: Run) -> None:
        run.step(schedule_activity("a", **timeouts))

    return go


def _schedule_and_start(
    heartbeat_details: str | None = None, **timeouts: Any
) -> Callable[[Run], None]:
    def go(run: Run) -> None:
        run.step(schedule_activity("a", **timeouts))
        run.advance(1)
        token = run.poll_activity("a")
        if heartbeat_details is not None:
            run.advance(1)
            assert run.heartbeat(token, heartbeat_details) is False

    return go


def _check_activity_timed_out(
    timeout_type: str, details: str | None = None, started_id: int | None = None
) -> Callable[[Run, h.HistoryEvent], None]:
    def check(run: Run, e: h.HistoryEvent) -> None:
        a = e.activity_timed_out
        assert a.timeout_type == timeout_type
        assert a.scheduled_event_id == 5
        if started_id is not None:
            assert a.started_event_id == started_id
        if details is None:
            assert not a.HasField("details")
        else:
            assert a.details == payload(details)
        assert "a" not in run.state.activities

    return check


CASES = {
    "workflow": Case(
        setup=lambda r: r.step(schedule_activity("a"), start_timer("t", 60)),
        kind=derived.WORKFLOW_TIMEOUT,
        ref=lambda r: 1,
        due_after=EXECUTION_TIMEOUT,
        appended=["WorkflowTimedOut"],
        check=lambda r, e: (
            e.workflow_timed_out.timeout_type == "START_TO_CLOSE"
            and r.state.status == "timed_out"
            and r.tasks() == set()
            and r.deadlines() == {}
        ),
    ),
    "decider": Case(
        setup=lambda r: r.poll_decision(),
        kind=derived.DECIDER_START_TO_CLOSE,
        ref=lambda r: r.state.decider.started_id,
        due_after=DECIDER_TIMEOUT,
        appended=["DeciderTimedOut", "DeciderScheduled"],
        check=lambda r, e: (
            e.decider_timed_out.scheduled_event_id == 2
            and e.decider_timed_out.started_event_id == 3
            and e.decider_timed_out.timeout_type == "START_TO_CLOSE"
            and r.decision_tasks() == [5]
        ),
    ),
    "schedule-to-start": Case(
        setup=_schedule(schedule_to_start=20),
        kind=derived.ACTIVITY_SCHEDULE_TO_START,
        ref=lambda r: _activity(r)[0],
        due_after=20,
        appended=["ActivityScheduledTimeout", "DeciderScheduled"],
        check=lambda r, e: (
            e.activity_scheduled_timeout.scheduled_event_id == 5
            and e.activity_scheduled_timeout.timeout_type == "SCHEDULE_TO_START"
            and r.activity_tasks() == []
            and "a" not in r.state.activities
        ),
    ),
    "start-to-close": Case(
        setup=_schedule_and_start(start_to_close=30),
        kind=derived.ACTIVITY_START_TO_CLOSE,
        ref=lambda r: _activity(r)[1],
        due_after=31,
        appended=["ActivityTimedOut", "DeciderScheduled"],
        check=_check_activity_timed_out("START_TO_CLOSE"),
    ),
    "start-to-close-with-heartbeat-details": Case(
        setup=_schedule_and_start("halfway", start_to_close=30),
        kind=derived.ACTIVITY_START_TO_CLOSE,
        ref=lambda r: _activity(r)[1],
        due_after=31,
        appended=["ActivityTimedOut", "DeciderScheduled"],
        check=_check_activity_timed_out("START_TO_CLOSE", "halfway"),
    ),
    "schedule-to-close-not-started": Case(
        setup=_schedule(schedule_to_close=50),
        kind=derived.ACTIVITY_SCHEDULE_TO_CLOSE,
        ref=lambda r: _activity(r)[0],
        due_after=50,
        appended=["ActivityTimedOut", "DeciderScheduled"],
        check=_check_activity_timed_out("SCHEDULE_TO_CLOSE", started_id=0),
    ),
    "schedule-to-close-started": Case(
        setup=_schedule_and_start(schedule_to_close=50, start_to_close=300),
        kind=derived.ACTIVITY_SCHEDULE_TO_CLOSE,
        ref=lambda r: _activity(r)[0],
        due_after=50,
        appended=["ActivityTimedOut", "DeciderScheduled"],
        check=_check_activity_timed_out("SCHEDULE_TO_CLOSE", started_id=6),
    ),
    "heartbeat-never-sent": Case(
        setup=_schedule_and_start(heartbeat=5),
        kind=derived.ACTIVITY_HEARTBEAT,
        ref=lambda r: _activity(r)[1],
        due_after=6,
        appended=["ActivityTimedOut", "DeciderScheduled"],
        check=_check_activity_timed_out("HEARTBEAT"),
    ),
    "heartbeat-with-details": Case(
        setup=_schedule_and_start("42%", heartbeat=5),
        kind=derived.ACTIVITY_HEARTBEAT,
        ref=lambda r: _activity(r)[1],
        due_after=7,  # started at +1, last heartbeat at +2
        appended=["ActivityTimedOut", "DeciderScheduled"],
        check=_check_activity_timed_out("HEARTBEAT", "42%"),
    ),
    "timer": Case(
        setup=lambda r: r.step(start_timer("t", 45)),
        kind=derived.TIMER,
        ref=lambda r: r.state.timers["t"].started_id,
        due_after=45,
        appended=["TimerExpired", "DeciderScheduled"],
        check=lambda r, e: (
            e.timer_expired.timer_id == "t"
            and e.timer_expired.started_event_id == 5
            and "t" not in r.state.timers
        ),
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_each_deadline_fires_its_event(case: Case) -> None:
    run = started()
    case.setup(run)
    ref = case.ref(run)
    assert run.deadlines()[(case.kind, ref)] == pytest.approx(EPOCH0 + case.due_after)

    # Not yet due: a no-op.
    run.at(EPOCH0 + case.due_after - 0.5)
    assert run.fire(case.kind, ref) is False
    run.assert_refused_cleanly()

    run.at(EPOCH0 + case.due_after)
    assert run.fire(case.kind, ref) is True
    assert run.last_types == case.appended
    fired = run.last.events[0]  # type: ignore[union-attr]
    # A check either asserts itself (returns None) or returns a condition.
    assert case.check(run, fired) is not False
    assert (case.kind, ref) not in run.deadlines()

    # A second node firing the same row appends nothing.
    run.advance(1)
    assert run.fire(case.kind, ref) is False
    assert run.last_types == []
    run.assert_contiguous()


@pytest.mark.parametrize(
    "case",
    [c for c in CASES.values() if c.kind != derived.DECIDER_START_TO_CLOSE],
    ids=[k for k, c in CASES.items() if c.kind != derived.DECIDER_START_TO_CLOSE],
)
def test_a_timeout_while_a_decision_is_started_queues_one_decider_scheduled(case: Case) -> None:
    run = started()
    case.setup(run)
    ref = case.ref(run)
    run.signal()
    run.poll_decision()
    due = run.deadlines()[(case.kind, ref)]
    run.at(due)
    assert run.fire(case.kind, ref) is True
    if case.kind == derived.WORKFLOW_TIMEOUT:
        assert run.last_types == ["WorkflowTimedOut"]
    else:
        assert run.last_types == [case.appended[0], "DeciderScheduled"]
        assert run.decision_tasks() == []  # queued behind the started task


# --- stale deadlines --------------------------------------------------------------


def _activity_completed(**timeouts: Any) -> Callable[[Run], tuple[str, int]]:
    def go(run: Run) -> tuple[str, int]:
        run.step(schedule_activity("a", **timeouts))
        sid = run.activity("a").scheduled_id
        token = run.poll_activity("a")
        run.activity_done(token)
        kind = (
            derived.ACTIVITY_SCHEDULE_TO_CLOSE
            if "schedule_to_close" in timeouts
            else derived.ACTIVITY_HEARTBEAT
            if "heartbeat" in timeouts
            else derived.ACTIVITY_START_TO_CLOSE
        )
        return kind, sid if kind == derived.ACTIVITY_SCHEDULE_TO_CLOSE else token.started_id

    return go


def _started_before_schedule_to_start(run: Run) -> tuple[str, int]:
    run.step(schedule_activity("a", schedule_to_start=10))
    sid = run.activity("a").scheduled_id
    run.poll_activity("a")
    return derived.ACTIVITY_SCHEDULE_TO_START, sid


def _decision_completed(run: Run) -> tuple[str, int]:
    token = run.poll_decision()
    run.decide(token)
    return derived.DECIDER_START_TO_CLOSE, token.started_id


def _old_decision_attempt(run: Run) -> tuple[str, int]:
    token = run.poll_decision()
    run.fail_decision(token)
    run.poll_decision()
    return derived.DECIDER_START_TO_CLOSE, token.started_id


def _timer_canceled(run: Run) -> tuple[str, int]:
    run.step(start_timer("t", 10))
    ref = run.state.timers["t"].started_id
    run.signal()
    run.step(cancel_timer("t"))
    return derived.TIMER, ref


def _timer_restarted(run: Run) -> tuple[str, int]:
    run.step(start_timer("t", 10))
    ref = run.state.timers["t"].started_id
    run.signal()
    run.step(cancel_timer("t"), start_timer("t", 10_000))
    return derived.TIMER, ref


def _run_closed(run: Run) -> tuple[str, int]:
    run.step(complete_workflow())
    return derived.WORKFLOW_TIMEOUT, 1


def _heartbeat_moved_it(run: Run) -> tuple[str, int]:
    run.step(schedule_activity("a", heartbeat=10))
    token = run.poll_activity("a")
    run.advance(8)
    run.heartbeat(token, "still here")
    return derived.ACTIVITY_HEARTBEAT, token.started_id


def _timed_out_already(run: Run) -> tuple[str, int]:
    run.step(schedule_activity("a", start_to_close=10, heartbeat=5))
    token = run.poll_activity("a")
    assert run.fire_when_due(derived.ACTIVITY_HEARTBEAT, token.started_id)
    return derived.ACTIVITY_START_TO_CLOSE, token.started_id


STALE = {
    "activity-completed-start-to-close": _activity_completed(start_to_close=10),
    "activity-completed-schedule-to-close": _activity_completed(schedule_to_close=10),
    "activity-completed-heartbeat": _activity_completed(heartbeat=10),
    "activity-started-before-schedule-to-start": _started_before_schedule_to_start,
    "activity-already-timed-out": _timed_out_already,
    "decision-completed": _decision_completed,
    "old-decision-attempt": _old_decision_attempt,
    "timer-canceled": _timer_canceled,
    "timer-restarted-same-id": _timer_restarted,
    "run-closed": _run_closed,
    "heartbeat-moved-it-later": _heartbeat_moved_it,
}


@pytest.mark.parametrize("make_stale", list(STALE.values()), ids=list(STALE))
def test_a_stale_deadline_is_a_no_op(make_stale: Callable[[Run], tuple[str, int]]) -> None:
    """The scanner fires a row at the due time it was armed with; by then its
    cause is gone or has moved, and nothing may be appended."""
    run = started()
    kind, ref = make_stale(run)
    armed = run.armed
    assert (kind, ref) in armed, "the scenario never armed that deadline"
    history = list(run.history)
    state = run.state.to_json()
    run.at(max(armed[(kind, ref)], run.now.timestamp()))
    assert run.fire(kind, ref) is False
    assert run.last_types == []
    assert run.history == history
    assert run.state.to_json() == state


def test_heartbeat_moves_the_heartbeat_deadline() -> None:
    run = started()
    run.step(schedule_activity("a", heartbeat=10, start_to_close=100))
    token = run.poll_activity("a")
    key = (derived.ACTIVITY_HEARTBEAT, token.started_id)
    assert run.deadlines()[key] == pytest.approx(EPOCH0 + 10)
    run.advance(8)
    run.heartbeat(token)
    assert run.deadlines()[key] == pytest.approx(EPOCH0 + 18)
    run.at(EPOCH0 + 10)
    assert run.fire(*key) is False
    run.at(EPOCH0 + 18)
    assert run.fire(*key) is True
    assert run.last_types == ["ActivityTimedOut", "DeciderScheduled"]
    assert run.history[-2].activity_timed_out.timeout_type == "HEARTBEAT"


def test_unknown_deadline_kind_is_a_no_op() -> None:
    run = started()
    run.advance(EXECUTION_TIMEOUT * 2)
    assert run.fire("no-such-kind", 1) is False
    assert run.fire(derived.TIMER, 999) is False
    assert run.last_types == []


# --- answers after a timeout ------------------------------------------------------


LATE_ANSWERS: dict[str, Callable[[Run, TaskToken], object]] = {
    "complete": lambda r, tok: r.activity_done(tok),
    "fail": lambda r, tok: r.activity_failed(tok),
    "canceled": lambda r, tok: r.activity_canceled(tok),
    "heartbeat": lambda r, tok: r.heartbeat(tok, "late"),
}

ACTIVITY_TIMEOUTS = {
    "start-to-close": (dict(start_to_close=5), derived.ACTIVITY_START_TO_CLOSE, "started"),
    "schedule-to-close": (dict(schedule_to_close=5), derived.ACTIVITY_SCHEDULE_TO_CLOSE, "sched"),
    "heartbeat": (dict(heartbeat=5), derived.ACTIVITY_HEARTBEAT, "started"),
}


@pytest.mark.parametrize("answer", list(LATE_ANSWERS.values()), ids=list(LATE_ANSWERS))
@pytest.mark.parametrize(
    ("timeouts", "kind", "ref"), list(ACTIVITY_TIMEOUTS.values()), ids=list(ACTIVITY_TIMEOUTS)
)
def test_an_activity_answer_after_its_timeout_is_refused(
    answer: Callable[[Run, TaskToken], object],
    timeouts: dict[str, Any],
    kind: str,
    ref: str,
) -> None:
    run = started()
    run.step(schedule_activity("a", **timeouts))
    token = run.poll_activity("a")
    assert run.fire_when_due(kind, token.started_id if ref == "started" else token.scheduled_id)
    assert run.last_types == ["ActivityTimedOut", "DeciderScheduled"]
    with pytest.raises(NotFound):
        answer(run, token)
    run.assert_refused_cleanly()


def test_a_runner_cannot_take_an_activity_after_schedule_to_start() -> None:
    run = started()
    run.step(schedule_activity("a", schedule_to_start=5))
    sid = run.activity("a").scheduled_id
    assert run.fire_when_due(derived.ACTIVITY_SCHEDULE_TO_START, sid)
    with pytest.raises(NotFound):
        run.apply(lambda t: start_activity_task(t, sid, "runner"))
    run.assert_refused_cleanly()


def test_a_decider_answer_after_its_timeout_is_refused() -> None:
    run = started()
    token = run.poll_decision()
    run.advance(DECIDER_TIMEOUT)
    assert run.fire(derived.DECIDER_START_TO_CLOSE, token.started_id)
    with pytest.raises(NotFound):
        run.decide(token, complete_workflow())
    run.assert_refused_cleanly()
    assert run.state.is_open


def test_the_workflow_timeout_abandons_a_started_decision_and_activity() -> None:
    run = started()
    run.step(schedule_activity("a", start_to_close=EXECUTION_TIMEOUT * 2))
    activity = run.poll_activity("a")
    run.signal()
    decision = run.poll_decision()
    assert run.fire_when_due(derived.WORKFLOW_TIMEOUT, 1)
    assert run.last_types == ["WorkflowTimedOut"]
    assert run.state.closed_at == pytest.approx(EPOCH0 + EXECUTION_TIMEOUT)
    assert run.deadlines() == {}
    assert run.tasks() == set()
    lates: list[Callable[[Run], object]] = [
        lambda r: r.activity_done(activity),
        lambda r: r.decide(decision, complete_workflow()),
    ]
    for late in lates:
        with pytest.raises(FailedPrecondition):
            late(run)
        run.assert_refused_cleanly()

"""Decision tasks that fail in a row: the first failure is recorded, later ones
append nothing and come back after a backoff (engine/decider_attempts.py)."""

from __future__ import annotations

import pytest

from orchestrator.engine import derived
from orchestrator.engine.decider_attempts import MAX_BACKOFF, backoff
from orchestrator.engine.errors import NotFound
from orchestrator.engine.events import fold
from orchestrator.engine.tokens import TaskToken
from tests.engine.builder import Run, complete_workflow, started


def _failed_twice() -> tuple[Run, TaskToken]:
    """A run whose decision task failed once (recorded), then again (quietly)."""
    run = started()  # 1 WorkflowStarted, 2 DeciderScheduled
    run.fail_decision(run.poll_decision())  # 3 DeciderStarted, 4 DeciderFailed, 5 Scheduled
    second = run.poll_decision()  # 6 DeciderStarted (attempt 2)
    run.fail_decision(second, "DECIDER_EXCEPTION")
    return run, second


def test_the_first_failure_is_recorded_and_retried_at_once() -> None:
    run = started()
    run.fail_decision(run.poll_decision())
    assert run.types[-2:] == ["DeciderFailed", "DeciderScheduled"]
    assert run.decision_tasks() == [5]
    token = run.poll_decision()
    assert token.attempt == 2
    assert run.event(6).decider_started.attempt == 2


def test_a_failure_in_a_row_appends_nothing_and_waits_out_a_backoff() -> None:
    run, _ = _failed_twice()
    assert run.types[-1] == "DeciderStarted"  # nothing after event 6
    assert len(run.history) == 6
    d = run.state.decider
    assert (d.retry_pending, d.attempt, d.failure_cause) == (True, 3, "DECIDER_EXCEPTION")
    assert run.decision_tasks() == []  # not before the backoff is over
    due = run.deadlines()[(derived.DECIDER_BACKOFF, 6)]
    assert due == pytest.approx(run.now.timestamp() + backoff(3))
    assert not run.fire(derived.DECIDER_BACKOFF, 6)  # not yet due
    assert run.fire_when_due(derived.DECIDER_BACKOFF, 6)
    assert run.decision_tasks() == [5]
    assert len(run.history) == 6  # the backoff's end appends nothing either


def test_a_retried_attempt_reuses_its_window_and_completes_normally() -> None:
    run, _ = _failed_twice()
    run.fire_when_due(derived.DECIDER_BACKOFF, 6)
    third = run.poll_decision()
    assert (third.scheduled_id, third.started_id, third.attempt) == (5, 6, 3)
    assert len(run.history) == 6  # handed out again on the same DeciderStarted
    # Its start-to-close runs from when it was handed out again.
    due = run.deadlines()[(derived.DECIDER_START_TO_CLOSE, 6)]
    assert due == pytest.approx(run.now.timestamp() + run.state.decider_timeout)
    run.decide(third, complete_workflow())
    assert run.types[-2:] == ["DeciderCompleted", "WorkflowSuccess"]
    assert run.event(7).decider_completed.started_event_id == 6
    run.assert_contiguous()


def test_a_late_answer_of_an_earlier_attempt_is_refused_and_changes_nothing() -> None:
    run, second = _failed_twice()
    run.fire_when_due(derived.DECIDER_BACKOFF, 6)
    third = run.poll_decision()
    with pytest.raises(NotFound):
        run.decide(second, complete_workflow())
    run.assert_refused_cleanly()
    with pytest.raises(NotFound):
        run.fail_decision(second)
    run.assert_refused_cleanly()
    run.decide(third)  # the current attempt still answers
    assert run.types[-1] == "DeciderCompleted"


def test_a_parked_task_cannot_be_answered_or_taken_before_its_backoff() -> None:
    run, second = _failed_twice()
    with pytest.raises(NotFound):
        run.decide(second)
    run.assert_refused_cleanly()
    with pytest.raises(NotFound):
        run.poll_decision(scheduled_id=5)
    run.assert_refused_cleanly()


def test_a_timeout_in_a_row_is_quiet_too() -> None:
    run = started()
    run.poll_decision()
    run.fire_when_due(derived.DECIDER_START_TO_CLOSE, 3)  # 4 DeciderTimedOut, 5 Scheduled
    run.poll_decision()  # 6 (attempt 2)
    run.fire_when_due(derived.DECIDER_START_TO_CLOSE, 6)
    assert len(run.history) == 6
    d = run.state.decider
    assert (d.retry_pending, d.attempt, d.failure_cause) == (True, 3, "TIMEOUT")
    run.fire_when_due(derived.DECIDER_BACKOFF, 6)
    run.poll_decision()
    run.fire_when_due(derived.DECIDER_START_TO_CLOSE, 6)  # attempt 3 times out: attempt 4
    assert run.state.decider.attempt == 4
    assert run.deadlines()[(derived.DECIDER_BACKOFF, 6)] == pytest.approx(
        run.now.timestamp() + backoff(4)
    )
    assert len(run.history) == 6


def test_backoff_doubles_up_to_a_minute() -> None:
    assert [backoff(n) for n in range(3, 11)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff(1000) == MAX_BACKOFF


def test_events_that_arrive_while_parked_are_seen_by_the_next_attempt() -> None:
    run, _ = _failed_twice()
    run.signal("fix")  # 7 Signal, 8 DeciderScheduled
    assert run.types[-2:] == ["Signal", "DeciderScheduled"]
    assert run.decision_tasks() == []  # the backoff still holds
    run.fire_when_due(derived.DECIDER_BACKOFF, 6)
    assert run.decision_tasks() == [8]
    token = run.poll_decision()  # 9: a new window that includes the signal
    assert (token.scheduled_id, token.started_id, token.attempt) == (8, 9, 3)
    assert run.event(9).decider_started.attempt == 3
    run.decide(token)
    assert run.state.decider.attempt == 1
    assert run.state.decider.failure_cause == ""
    run.assert_contiguous()


def test_a_close_while_parked_leaves_no_task_or_deadline() -> None:
    run, _ = _failed_twice()
    run.terminate()
    assert run.types[-1] == "WorkflowTerminated"
    assert run.tasks() == set()
    assert run.deadlines() == {}


def test_the_stored_state_is_still_the_fold_of_the_history() -> None:
    run, _ = _failed_twice()
    assert fold(run.key, run.history).folded_part() == run.state.folded_part()
    run.fire_when_due(derived.DECIDER_BACKOFF, 6)
    run.poll_decision()
    assert fold(run.key, run.history).folded_part() == run.state.folded_part()
    run.signal("more")
    assert fold(run.key, run.history).folded_part() == run.state.folded_part()

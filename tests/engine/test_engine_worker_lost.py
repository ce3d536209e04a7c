"""A worker's session is lost (README "Workers and nodes"): each task of the
run that session had started times out at once as WORKER_LOST, with the
worker's identity and session; tasks of other sessions, and a run with none
of its tasks, are left alone; a decider that loses a retried attempt appends
nothing (the transient retry rule)."""

from __future__ import annotations

import pytest

from orchestrator.engine.activity import start_activity_task
from orchestrator.engine.decisions import start_decision_task
from orchestrator.engine.errors import NotFound
from orchestrator.engine.timeouts import WORKER_LOST, worker_lost
from orchestrator.engine.tokens import TaskToken

from .builder import Run, complete_workflow, schedule_activity, started


def _start(run: Run, activity_id: str, session: str) -> int:
    sid = run.activity(activity_id).scheduled_id
    run.apply(lambda t: start_activity_task(t, sid, f"runner-{session}", session))
    return run.activity(activity_id).started_id


def test_the_lost_sessions_activities_time_out_and_the_others_run_on() -> None:
    run = started()
    run.step(schedule_activity("a"), schedule_activity("b"), schedule_activity("c"))
    _start(run, "a", "s1")
    _start(run, "b", "s1")
    c_started = _start(run, "c", "s2")
    assert run.apply(lambda t: worker_lost(t, "s1", "runner-s1")) is True
    assert run.last_types == ["ActivityTimedOut", "ActivityTimedOut", "DeciderScheduled"]
    for event in run.history[-3:-1]:
        lost = event.activity_timed_out
        assert lost.timeout_type == WORKER_LOST
        assert (lost.identity, lost.worker_session_id) == ("runner-s1", "s1")
    assert run.activity("c").started_id == c_started
    # Again (a reaper that died half way and a new leader repeats it): nothing.
    assert run.apply(lambda t: worker_lost(t, "s1", "runner-s1")) is False
    assert run.last_types == []


def test_a_late_answer_of_the_lost_worker_is_refused() -> None:
    run = started()
    run.step(schedule_activity("a"))
    sid = run.activity("a").scheduled_id
    run.apply(lambda t: start_activity_task(t, sid, "runner", "s1"))
    token_started = run.activity("a").started_id
    run.apply(lambda t: worker_lost(t, "s1", "runner"))
    with pytest.raises(NotFound):
        run.activity_done(TaskToken(run.key, "activity", sid, token_started))


def test_a_lost_decider_times_out_its_decision_task_and_another_is_scheduled() -> None:
    run = started()
    run.step(schedule_activity("a"))
    run.signal()
    sid = run.state.decider.scheduled_id
    run.apply(lambda t: start_decision_task(t, sid, "decider-1", "d1"))
    assert run.apply(lambda t: worker_lost(t, "other", "someone")) is False
    assert run.apply(lambda t: worker_lost(t, "d1", "decider-1")) is True
    assert run.last_types == ["DeciderTimedOut", "DeciderScheduled"]
    lost = run.history[-2].decider_timed_out
    assert (lost.timeout_type, lost.identity, lost.worker_session_id) == (
        WORKER_LOST,
        "decider-1",
        "d1",
    )
    assert run.state.decider.failure_cause == WORKER_LOST
    # Lost again on its retried attempt: parked quietly, nothing appended.
    again = run.state.decider.scheduled_id
    run.apply(lambda t: start_decision_task(t, again, "decider-2", "d2"))
    assert run.apply(lambda t: worker_lost(t, "d2", "decider-2")) is True
    assert run.last_types == []
    assert run.state.decider.retry_pending and run.state.decider.failure_cause == WORKER_LOST


def test_a_closed_run_has_nothing_to_lose() -> None:
    run = started()
    run.step(complete_workflow())
    assert run.apply(lambda t: worker_lost(t, "s1", "runner")) is False

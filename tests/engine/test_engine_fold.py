"""The run state is the fold of its history (ARCHITECTURE.md "Mutable state and
the event log"), it survives its JSON form, and the history keeps invariant 1."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator.engine import derived
from orchestrator.engine.events import CLOSE_EVENTS, fold
from orchestrator.engine.state import RunState
from orchestrator.engine.transition import Transition

from .builder import (
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


def seed_002_parallel(run: Run) -> None:
    """Seed 002's "perfect flow with multiple activities", interleaved as there."""
    run.advance(1)
    first = run.poll_decision()
    run.decide(first, schedule_activity("A"), schedule_activity("B"))
    run.advance(1)
    b = run.poll_activity("B")
    a = run.poll_activity("A")
    run.advance(2)
    run.activity_done(b)  # schedules the decider
    second = run.poll_decision()
    run.advance(1)
    run.activity_done(a)  # queued behind the started task
    run.decide(second, schedule_activity("C"))
    third = run.poll_decision()
    c = run.poll_activity("C")
    run.decide(third)
    run.advance(3)
    run.activity_done(c)
    run.step(complete_workflow())


def timers_and_cancels(run: Run) -> None:
    run.step(
        start_timer("short", 5),
        start_timer("long", 500),
        schedule_activity("queued", schedule_to_start=100),
        schedule_activity("running", heartbeat=30, start_to_close=600),
        marker("begin"),
    )
    running = run.poll_activity("running")
    run.advance(3)
    assert run.heartbeat(running, "10%") is False
    run.advance(3)
    assert run.fire(derived.TIMER, run.state.timers["short"].started_id)
    run.step(
        cancel_timer("long"),
        cancel_timer("short"),  # already expired: TimerCancelFailed
        cancel_activity("queued"),  # not started: canceled at once
        cancel_activity("running"),  # started: the runner is asked
        start_timer("short", 1),
    )
    assert run.heartbeat(running, "50%") is True
    run.activity_canceled(running)
    run.step(schedule_activity("running"), start_timer("short"))  # a duplicate timer
    run.step(fail_workflow("gave up"))


def timeouts_and_retries(run: Run) -> None:
    lost = run.poll_decision()
    run.advance(10)
    assert run.fire(derived.DECIDER_START_TO_CLOSE, lost.started_id)
    run.step(
        schedule_activity("nobody", schedule_to_start=5),
        schedule_activity("slow", start_to_close=20),
        schedule_activity("silent", heartbeat=4, schedule_to_close=100),
    )
    slow = run.poll_activity("slow")
    silent = run.poll_activity("silent")
    run.advance(2)
    run.heartbeat(silent, "tick")
    run.advance(3)
    assert run.fire(derived.ACTIVITY_SCHEDULE_TO_START, run.activity("nobody").scheduled_id)
    deciding = run.poll_decision()
    run.advance(1)
    assert run.fire(derived.ACTIVITY_HEARTBEAT, silent.started_id)
    run.fail_decision(deciding)
    retry = run.poll_decision()
    run.signal("mid-decision")
    run.decide(retry, schedule_activity("nobody"), complete_workflow())  # WorkflowCloseFailed
    run.advance(30)
    assert run.fire(derived.ACTIVITY_START_TO_CLOSE, slow.started_id)
    run.terminate()


def signals_and_cancel(run: Run) -> None:
    run.signal("a")
    run.signal("b")
    run.step(marker("saw-signals"))
    run.request_cancel()
    run.request_cancel()
    run.signal("c")
    token = run.poll_decision()
    run.signal("d")
    run.decide(token, cancel_workflow())  # refused: "d" unseen
    run.step(cancel_workflow())


def continued(run: Run) -> None:
    run.step(schedule_activity("x"), start_timer("t", 60))
    run.signal()
    run.step(continue_as_new("again"))


def workflow_timeout(run: Run) -> None:
    run.step(schedule_activity("x"), start_timer("t", 60))
    run.poll_activity("x")
    run.signal()
    run.poll_decision()
    run.at(run.deadlines()[(derived.WORKFLOW_TIMEOUT, 1)])
    assert run.fire(derived.WORKFLOW_TIMEOUT, 1)


def still_open(run: Run) -> None:
    run.step(schedule_activity("x", heartbeat=10), start_timer("t", 60))
    x = run.poll_activity("x")
    run.heartbeat(x, "progress")
    run.signal()
    run.poll_decision()
    run.signal()


SCRIPTS: dict[str, Callable[[Run], None]] = {
    "seed-002-parallel": seed_002_parallel,
    "timers-and-cancels": timers_and_cancels,
    "timeouts-and-retries": timeouts_and_retries,
    "signals-and-cancel": signals_and_cancel,
    "continue-as-new": continued,
    "workflow-timeout": workflow_timeout,
    "still-open": still_open,
}


@pytest.fixture(params=list(SCRIPTS.values()), ids=list(SCRIPTS))
def run(request: pytest.FixtureRequest) -> Run:
    r = started()
    request.param(r)
    return r


def test_fold_of_the_history_equals_the_carried_state(run: Run) -> None:
    assert run.snapshots
    for length, state in run.snapshots:
        rebuilt = fold(run.key, run.history[:length])
        assert rebuilt.folded_part() == state.folded_part(), f"after {length}"
        # What the store derives from the rebuilt state matches, heartbeats aside.
        assert derived.tasks(rebuilt) == derived.tasks(state)
    assert fold(run.key, run.history).folded_part() == run.state.folded_part()


def test_state_round_trips_through_json(run: Run) -> None:
    for _, state in run.snapshots:
        text = state.to_json()
        back = RunState.from_json(text)
        assert back == state
        assert back.to_json() == text
        assert derived.deadlines(back) == derived.deadlines(state)


def test_event_ids_are_contiguous_and_workflow_started_is_first(run: Run) -> None:
    run.assert_contiguous()
    assert [e.type for e in run.history].count("WorkflowStarted") == 1
    assert run.state.next_event_id == len(run.history) + 1
    for e in run.history:
        assert e.WhichOneof("attributes") is not None
        assert e.timestamp.seconds > 0


def test_a_close_event_is_the_last_event(run: Run) -> None:
    closes = [i for i, e in enumerate(run.history) if e.type in CLOSE_EVENTS]
    if run.state.is_open:
        assert closes == []
    else:
        assert closes == [len(run.history) - 1]
        assert CLOSE_EVENTS[run.history[-1].type] == run.state.status


def test_successor_runs_fold_too(run: Run) -> None:
    for successor in run.new_runs:
        assert isinstance(successor, Transition)
        assert [e.event_id for e in successor.events] == list(range(1, len(successor.events) + 1))
        rebuilt = fold(successor.state.key, successor.events)
        assert rebuilt.folded_part() == successor.state.folded_part()
        assert rebuilt.continued_from_run_id == run.key.run_id


def test_the_scripts_cover_what_they_claim() -> None:
    """Guard against a script silently losing its point when the engine changes."""
    expected = {
        "seed-002-parallel": ["ActivitySuccess", "WorkflowSuccess"],
        "timers-and-cancels": [
            "TimerExpired",
            "TimerCanceled",
            "TimerCancelFailed",
            "ActivityCanceled",
            "ActivityCancelRequested",
            "TimerScheduleFailed",
            "Marker",
            "WorkflowFailed",
        ],
        "timeouts-and-retries": [
            "DeciderTimedOut",
            "DeciderFailed",
            "ActivityScheduledTimeout",
            "ActivityTimedOut",
            "WorkflowCloseFailed",
            "WorkflowTerminated",
        ],
        "signals-and-cancel": ["Signal", "WorkflowCancelRequested", "WorkflowCanceled"],
        "continue-as-new": ["WorkflowContinuedAsNew"],
        "workflow-timeout": ["WorkflowTimedOut"],
        "still-open": ["ActivityStarted", "DeciderStarted"],
    }
    for name, script in SCRIPTS.items():
        r = started()
        script(r)
        types = {e.type for e in r.history}
        missing = [t for t in expected[name] if t not in types]
        assert not missing, f"{name} lacks {missing}"
    # seed 002's own numbering for the parallel flow's first decision
    r = started()
    seed_002_parallel(r)
    assert [e.type for e in r.history[:6]] == [
        "WorkflowStarted",
        "DeciderScheduled",
        "DeciderStarted",
        "DeciderCompleted",
        "ActivityScheduled",
        "ActivityScheduled",
    ]

"""The decision-task dance (seed 002): which events schedule the decider. Single
decider, window, late answers and unhandled events on close are in test_engine_decider.py.

ARCHITECTURE.md invariants 2, 3, 4 and 8, with test_engine_decider.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator.engine import derived
from orchestrator.engine.decisions import complete_decision_task
from orchestrator.engine.events import EVENT_TYPES, TRIGGERS
from orchestrator.engine.tokens import TaskToken

from .builder import (
    Run,
    cancel_activity,
    cancel_timer,
    marker,
    schedule_activity,
    start_timer,
    started,
)
from .decider_turns import outstanding

# --- 5. which events schedule the decider --------------------------------------


def idle() -> Run:
    """A started run whose decider is idle (nothing scheduled, nothing started), with
    activity "a" (not started), activity "b" (started) and timer "t" pending."""
    run = started()
    run.step(
        schedule_activity("a", schedule_to_start=20, start_to_close=60),
        schedule_activity("b", start_to_close=60),
        start_timer("t", 30),
    )
    run.poll_activity("b")
    assert not run.state.decider.scheduled_id
    assert not run.state.decider.started_id
    return run


def _b_token(run: Run) -> TaskToken:
    act = run.activity("b")
    return TaskToken(run.key, "activity", act.scheduled_id, act.started_id)


def _decision_then(*decisions: object) -> Callable[[Run], object]:
    def go(run: Run) -> None:
        run.signal("wake")
        token = run.poll_decision()
        run.apply(
            lambda t: complete_decision_task(
                t,
                token,
                decisions,  # type: ignore[arg-type]
                "decider",
                run.ctx,
            )
        )

    return go


def _cancel_b_then_runner_cancels(run: Run) -> None:
    token = _b_token(run)
    _decision_then(cancel_activity("b"))(run)
    run.activity_canceled(token)


# (id, command, what it appends) with the decider idle beforehand
OUTSIDE_ROWS: list[tuple[str, Callable[[Run], object], list[str]]] = [
    ("Signal", lambda r: r.signal(), ["Signal", "DeciderScheduled"]),
    (
        "WorkflowCancelRequested",
        lambda r: r.request_cancel(),
        ["WorkflowCancelRequested", "DeciderScheduled"],
    ),
    (
        "ActivitySuccess",
        lambda r: r.activity_done(_b_token(r)),
        ["ActivitySuccess", "DeciderScheduled"],
    ),
    (
        "ActivityFailed",
        lambda r: r.activity_failed(_b_token(r)),
        ["ActivityFailed", "DeciderScheduled"],
    ),
    (
        "ActivityTimedOut",
        lambda r: r.fire_when_due(derived.ACTIVITY_START_TO_CLOSE, r.activity("b").started_id),
        ["ActivityTimedOut", "DeciderScheduled"],
    ),
    (
        "ActivityScheduledTimeout",
        lambda r: r.fire_when_due(derived.ACTIVITY_SCHEDULE_TO_START, r.activity("a").scheduled_id),
        ["ActivityScheduledTimeout", "DeciderScheduled"],
    ),
    (
        "TimerExpired",
        lambda r: r.fire_when_due(derived.TIMER, r.state.timers["t"].started_id),
        ["TimerExpired", "DeciderScheduled"],
    ),
    ("ActivityStarted", lambda r: r.poll_activity("a"), ["ActivityStarted"]),
    ("heartbeat", lambda r: r.heartbeat(_b_token(r), "hb"), []),
]

DECISION_ROWS: list[tuple[str, Callable[[Run], object], list[str]]] = [
    (
        "ActivityCanceled",
        _cancel_b_then_runner_cancels,
        ["ActivityCanceled", "DeciderScheduled"],
    ),
    (
        "ActivityScheduleFailed",
        _decision_then(schedule_activity("a")),
        ["DeciderCompleted", "ActivityScheduleFailed", "DeciderScheduled"],
    ),
    (
        "TimerScheduleFailed",
        _decision_then(start_timer("t")),
        ["DeciderCompleted", "TimerScheduleFailed", "DeciderScheduled"],
    ),
    (
        "TimerCancelFailed",
        _decision_then(cancel_timer("nope")),
        ["DeciderCompleted", "TimerCancelFailed", "DeciderScheduled"],
    ),
    (
        "ActivityCancelFailed",
        _decision_then(cancel_activity("nope")),
        ["DeciderCompleted", "ActivityCancelFailed", "DeciderScheduled"],
    ),
    ("Marker", _decision_then(marker("m")), ["DeciderCompleted", "Marker"]),
    (
        "two-Markers",
        _decision_then(marker("m1"), marker("m2")),
        ["DeciderCompleted", "Marker", "Marker"],
    ),
    (
        "ActivityScheduled",
        _decision_then(schedule_activity("c")),
        ["DeciderCompleted", "ActivityScheduled"],
    ),
    ("TimerScheduled", _decision_then(start_timer("t2")), ["DeciderCompleted", "TimerScheduled"]),
    ("TimerCanceled", _decision_then(cancel_timer("t")), ["DeciderCompleted", "TimerCanceled"]),
    (
        "ActivityCancelRequested-started",
        _decision_then(cancel_activity("b")),
        ["DeciderCompleted", "ActivityCancelRequested"],
    ),
    (
        "ActivityCancelRequested-not-started",
        _decision_then(cancel_activity("a")),
        ["DeciderCompleted", "ActivityCancelRequested", "ActivityCanceled", "DeciderScheduled"],
    ),
    ("no-decisions", _decision_then(), ["DeciderCompleted"]),
]


@pytest.mark.parametrize(
    ("command", "expected"),
    [row[1:] for row in OUTSIDE_ROWS + DECISION_ROWS],
    ids=[row[0] for row in OUTSIDE_ROWS + DECISION_ROWS],
)
def test_which_events_schedule_the_decider(
    command: Callable[[Run], object], expected: list[str]
) -> None:
    run = idle()
    command(run)
    assert run.last_types == expected
    if expected and expected[-1] == "DeciderScheduled":
        assert run.decision_tasks() == [run.history[-1].event_id]
    else:
        assert run.decision_tasks() == []
        assert not run.state.decider.scheduled_id


@pytest.mark.parametrize(
    ("command", "expected"),
    [row[1:] for row in OUTSIDE_ROWS],
    ids=[row[0] for row in OUTSIDE_ROWS],
)
def test_a_trigger_while_a_decision_is_started_and_one_queued_appends_no_decider_scheduled(
    command: Callable[[Run], object], expected: list[str]
) -> None:
    run = idle()
    run.signal("wake")
    run.poll_decision()
    run.signal("queue")
    assert outstanding(run) == (1, 1)
    command(run)
    assert run.last_types == [t for t in expected if t != "DeciderScheduled"]
    assert outstanding(run) == (1, 1)
    assert run.decision_tasks() == []


def test_triggers_match_the_contract() -> None:
    """CONTRACT.md "Event types": the trigger column, for the events the proto has."""
    contract_triggers = {
        "WorkflowCancelRequested",
        "WorkflowCloseFailed",
        "DeciderTimedOut",  # (reschedules)
        "DeciderFailed",  # (reschedules)
        "ActivityScheduleFailed",
        "ActivitySuccess",
        "ActivityFailed",
        "ActivityTimedOut",
        "ActivityScheduledTimeout",
        "ActivityCanceled",
        "ActivityCancelFailed",
        "TimerScheduleFailed",
        "TimerExpired",
        "TimerCancelFailed",
        "Signal",
        "MarkerFailed",
        "LockAcquired",
        "ReplayRequested",
        "ChildWorkflowSuccess",
        "ChildWorkflowFailed",
        "ChildWorkflowTimedOut",
        "ChildWorkflowCanceled",
        "ChildWorkflowTerminated",
        "StartChildWorkflowFailed",
        # Not in CONTRACT.md's table: the refusals of the lock and external-signal
        # decisions, triggers like every other refused decision's ...Failed event.
        "RequestLockFailed",
        "ReleaseLockFailed",
        "SignalExternalWorkflowFailed",
    }
    assert contract_triggers & EVENT_TYPES == TRIGGERS
    assert "Marker" not in TRIGGERS
    assert TRIGGERS <= EVENT_TYPES

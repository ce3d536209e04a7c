"""The decision-task dance (seed 002): single decider, window, late answers and
unhandled events on close. Which events schedule the decider is in
test_engine_decider_triggers.py.

ARCHITECTURE.md invariants 2, 3, 4 and 8.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator.engine import derived
from orchestrator.engine.decisions import start_decision_task
from orchestrator.engine.errors import NotFound
from orchestrator.engine.tokens import TaskToken

from .builder import (
    Run,
    cancel_activity,
    cancel_workflow,
    complete_workflow,
    continue_as_new,
    fail_workflow,
    marker,
    schedule_activity,
    start_timer,
    started,
)
from .decider_turns import outstanding

# --- 1. single decider ------------------------------------------------------


def end_by_completing(run: Run, token: TaskToken) -> None:
    run.decide(token)


def end_by_failing(run: Run, token: TaskToken) -> None:
    run.fail_decision(token)


def end_by_timing_out(run: Run, token: TaskToken) -> None:
    assert run.fire_when_due(derived.DECIDER_START_TO_CLOSE, token.started_id)


@pytest.mark.parametrize(
    ("end_started_task", "ending_types"),
    [
        (end_by_completing, ["DeciderCompleted"]),
        (end_by_failing, ["DeciderFailed"]),
        (end_by_timing_out, ["DeciderTimedOut"]),
    ],
    ids=["completed", "failed", "timed-out"],
)
def test_trigger_while_started_queues_one_decision_task(
    end_started_task: Callable[[Run, TaskToken], None], ending_types: list[str]
) -> None:
    run = started()
    token = run.poll_decision()
    assert run.decision_tasks() == []

    run.signal("first")
    assert run.last_types == ["Signal", "DeciderScheduled"]
    queued = run.state.decider.scheduled_id
    assert queued == run.history[-1].event_id

    run.signal("second")
    run.request_cancel()
    assert run.types[-2:] == ["Signal", "WorkflowCancelRequested"]
    assert run.types.count("DeciderScheduled") == 2  # the start's and the queued one
    assert outstanding(run) == (1, 1)

    # The queued task waits for the started one: not handed out, cannot be taken.
    assert run.decision_tasks() == []
    with pytest.raises(NotFound):
        run.poll_decision(queued)
    run.assert_refused_cleanly()

    end_started_task(run, token)
    # The started task's end reuses the queued DeciderScheduled: no second one.
    assert run.last_types == ending_types
    assert run.state.decider.scheduled_id == queued
    assert run.decision_tasks() == [queued]
    assert outstanding(run) == (1, 0)

    nxt = run.poll_decision()
    assert nxt.scheduled_id == queued
    assert outstanding(run) == (0, 1)


def test_only_one_decider_gets_a_decision_task() -> None:
    run = started()
    scheduled = run.state.decider.scheduled_id
    first = run.poll_decision(scheduled, identity="decider-a")
    assert run.event(first.started_id).decider_started.identity == "decider-a"

    with pytest.raises(NotFound):
        run.poll_decision(scheduled, identity="decider-b")
    run.assert_refused_cleanly()
    assert run.types == ["WorkflowStarted", "DeciderScheduled", "DeciderStarted"]


@pytest.mark.parametrize("scheduled_id", [0, 1, 3, 99], ids=lambda i: f"sid-{i}")
def test_start_decision_task_with_a_wrong_scheduled_id_is_refused(scheduled_id: int) -> None:
    run = started()
    assert run.state.decider.scheduled_id == 2
    with pytest.raises(NotFound):
        run.apply(lambda t: start_decision_task(t, scheduled_id, "decider"))
    run.assert_refused_cleanly()


def test_single_decider_holds_through_a_busy_script() -> None:
    """Interleave triggers with polls, answers and timeouts; after every command
    at most one decision task is scheduled and at most one is started."""
    run = started()
    run.step(schedule_activity("a"), schedule_activity("b"), start_timer("t", 5))
    script: list[Callable[[Run], object]] = [
        lambda r: r.signal("s1"),
        lambda r: r.poll_decision(),
        lambda r: r.signal("s2"),
        lambda r: r.activity_done(r.poll_activity("a")),
        lambda r: r.fire_when_due(derived.TIMER, r.state.timers["t"].started_id),
        lambda r: r.fire_when_due(derived.DECIDER_START_TO_CLOSE, r.state.decider.started_id),
        lambda r: r.signal("s3"),
        lambda r: r.poll_decision(),
        lambda r: r.activity_failed(r.poll_activity("b")),
        lambda r: r.decide(
            TaskToken(
                r.key,
                "decision",
                r.state.decider.started_scheduled_id,
                r.state.decider.started_id,
                r.state.decider.attempt,
            )
        ),
        lambda r: r.signal("s4"),
    ]
    for command in script:
        command(run)
        n_scheduled, n_started = outstanding(run)
        assert n_scheduled <= 1
        assert n_started <= 1
        assert (n_scheduled, n_started) == (
            int(bool(run.state.decider.scheduled_id)),
            int(bool(run.state.decider.started_id)),
        )
        assert len(run.decision_tasks()) <= 1
        if run.state.decider.started_id:
            assert run.decision_tasks() == []
    run.assert_contiguous()


# --- 2. window ----------------------------------------------------------------


def test_previous_started_id_is_the_last_completed_decision_task() -> None:
    run = started()  # 1 WorkflowStarted, 2 DeciderScheduled
    steps: list[tuple[Callable[[Run], object], list[str], int]] = [
        # command, what it appends, previous_started_id afterwards
        (lambda r: r.poll_decision(), ["DeciderStarted"], 0),  # 3
        (
            lambda r: r.decide(_current(r), start_timer("t", 5)),
            ["DeciderCompleted", "TimerScheduled"],
            3,
        ),  # 4, 5
        (lambda r: r.signal(), ["Signal", "DeciderScheduled"], 3),  # 6, 7
        (lambda r: r.poll_decision(), ["DeciderStarted"], 3),  # 8
        (
            lambda r: r.fire_when_due(derived.DECIDER_START_TO_CLOSE, 8),
            ["DeciderTimedOut", "DeciderScheduled"],
            3,
        ),  # 9, 10
        (lambda r: r.poll_decision(), ["DeciderStarted"], 3),  # 11
        (lambda r: r.decide(_current(r)), ["DeciderCompleted"], 11),  # 12
        (lambda r: r.signal(), ["Signal", "DeciderScheduled"], 11),  # 13, 14
        (lambda r: r.poll_decision(), ["DeciderStarted"], 11),  # 15
        (lambda r: r.fail_decision(_current(r)), ["DeciderFailed", "DeciderScheduled"], 11),
        (lambda r: r.poll_decision(), ["DeciderStarted"], 11),  # 18
        (
            lambda r: r.fire_when_due(derived.TIMER, 5),
            ["TimerExpired", "DeciderScheduled"],
            11,
        ),  # 19, 20 (queued behind 18)
        (lambda r: r.decide(_current(r)), ["DeciderCompleted"], 18),  # 21
        (lambda r: r.poll_decision(), ["DeciderStarted"], 18),  # 22
        (lambda r: r.decide(_current(r), complete_workflow()), ["DeciderCompleted"], 22),
    ]
    for command, appended, previous in steps:
        command(run)
        assert run.last_types[: len(appended)] == appended
        assert run.state.decider.previous_started_id == previous
    assert run.types[-1] == "WorkflowSuccess"
    # The decider kept its window ends: every DeciderStarted is where a window
    # ends, and the previous one is never after the current one.
    started_ids = [e.event_id for e in run.history if e.type == "DeciderStarted"]
    assert started_ids == [3, 8, 11, 15, 18, 22]


def _current(run: Run) -> TaskToken:
    dec = run.state.decider
    assert dec.started_id, "no decision task is started"
    return TaskToken(run.key, "decision", dec.started_scheduled_id, dec.started_id, dec.attempt)


def test_window_events_up_to_decider_started_include_the_triggers() -> None:
    """What a decider sees (events up to its DeciderStarted, from previous_started_id)
    contains every trigger that arrived since the last completed task."""
    run = started()
    run.step(start_timer("t", 5))
    run.signal("a")
    token = run.poll_decision()
    run.signal("b")  # after this DeciderStarted: belongs to the next window
    prev = run.state.decider.previous_started_id
    window = [e.type for e in run.history[prev : token.started_id]]
    assert "Signal" in window
    assert window[-1] == "DeciderStarted"
    run.decide(token)
    nxt = run.poll_decision()
    window2 = [e for e in run.history[run.state.decider.previous_started_id : nxt.started_id]]
    assert [e.signal.signal_name for e in window2 if e.type == "Signal"] == ["b"]


# --- 3. late answers ------------------------------------------------------------


@pytest.mark.parametrize("queued", [False, True], ids=["nothing-queued", "one-queued"])
def test_late_answer_after_decider_timed_out_is_refused(queued: bool) -> None:
    run = started()
    token = run.poll_decision()
    if queued:
        run.signal()
    n_scheduled = run.types.count("DeciderScheduled")

    assert run.fire_when_due(derived.DECIDER_START_TO_CLOSE, token.started_id)
    if queued:
        assert run.last_types == ["DeciderTimedOut"]
        assert run.types.count("DeciderScheduled") == n_scheduled
    else:
        assert run.last_types == ["DeciderTimedOut", "DeciderScheduled"]
        assert run.types.count("DeciderScheduled") == n_scheduled + 1
    timed_out = run.history[-1] if queued else run.history[-2]
    assert timed_out.decider_timed_out.started_event_id == token.started_id
    assert timed_out.decider_timed_out.scheduled_event_id == token.scheduled_id
    assert run.decision_tasks() == [run.state.decider.scheduled_id]

    lates: list[Callable[[Run], object]] = [
        lambda r: r.decide(token, complete_workflow()),
        lambda r: r.fail_decision(token),
    ]
    for late in lates:
        with pytest.raises(NotFound):
            late(run)
        run.assert_refused_cleanly()

    # Still refused once another decider has taken the rescheduled task.
    fresh = run.poll_decision()
    with pytest.raises(NotFound):
        run.decide(token, complete_workflow())
    run.assert_refused_cleanly()
    run.decide(fresh, complete_workflow())
    assert run.types[-1] == "WorkflowSuccess"


@pytest.mark.parametrize(
    "forge",
    [
        lambda tok: TaskToken(tok.key, "decision", tok.scheduled_id, tok.started_id + 1),
        lambda tok: TaskToken(tok.key, "decision", tok.scheduled_id + 1, tok.started_id),
        lambda tok: TaskToken(tok.key, "decision", tok.scheduled_id, 0),
    ],
    ids=["wrong-started", "wrong-scheduled", "no-started"],
)
def test_answer_with_a_token_of_another_attempt_is_refused(
    forge: Callable[[TaskToken], TaskToken],
) -> None:
    run = started()
    token = run.poll_decision()
    with pytest.raises(NotFound):
        run.decide(forge(token), complete_workflow())
    run.assert_refused_cleanly()


def test_a_second_answer_to_the_same_task_is_refused() -> None:
    run = started()
    token = run.poll_decision()
    run.decide(token, marker("once"))
    with pytest.raises(NotFound):
        run.decide(token, marker("twice"))
    run.assert_refused_cleanly()
    assert run.types.count("Marker") == 1


# --- 4. unhandled events on close (invariant 8) -------------------------------

CLOSES = [
    ("CompleteWorkflow", complete_workflow(), "WorkflowSuccess", "completed"),
    ("FailWorkflow", fail_workflow(), "WorkflowFailed", "failed"),
    ("CancelWorkflow", cancel_workflow(), "WorkflowCanceled", "canceled"),
    ("ContinueAsNew", continue_as_new(), "WorkflowContinuedAsNew", "continued_as_new"),
]


@pytest.mark.parametrize(
    ("decision_type", "close", "close_event", "status"), CLOSES, ids=[c[0] for c in CLOSES]
)
def test_close_refused_when_a_trigger_arrived_mid_decision(
    decision_type: str, close: object, close_event: str, status: str
) -> None:
    run = started()
    run.step(schedule_activity("old"))
    run.signal("wake")
    token = run.poll_decision()
    run.signal("unseen")  # arrives while the decider is deciding
    queued = run.state.decider.scheduled_id
    assert queued

    run.decide(
        token,
        schedule_activity("a"),
        start_timer("t", 30),
        marker("m"),
        cancel_activity("old"),
        close,  # type: ignore[arg-type]
    )
    assert run.last_types == [
        "DeciderCompleted",
        "ActivityScheduled",
        "TimerScheduled",
        "Marker",
        "ActivityCancelRequested",
        "ActivityCanceled",
        "WorkflowCloseFailed",
    ]
    completed_id = run.history[-7].event_id
    failed = run.history[-1].workflow_close_failed
    assert failed.decision_type == decision_type
    assert failed.cause == "UNHANDLED_EVENTS"
    assert failed.decider_completed_event_id == completed_id

    assert run.state.is_open
    assert run.new_runs == []
    # The other decisions applied.
    assert set(run.state.activities) == {"a"}
    assert set(run.state.timers) == {"t"}
    # The queued decision task (no second DeciderScheduled) is now handed out.
    assert run.types.count("DeciderScheduled") == 3
    assert run.decision_tasks() == [queued]

    # The next decider, having seen the signal, may close.
    run.step(close)  # type: ignore[arg-type]
    assert run.types[-1] == close_event
    assert run.state.status == status


@pytest.mark.parametrize(
    ("decision_type", "close", "close_event", "status"), CLOSES, ids=[c[0] for c in CLOSES]
)
def test_close_accepted_when_nothing_arrived_mid_decision(
    decision_type: str, close: object, close_event: str, status: str
) -> None:
    run = started()
    run.signal("seen")  # before the DeciderStarted: inside the window
    token = run.poll_decision()
    run.decide(token, marker("m"), close)  # type: ignore[arg-type]
    assert run.last_types == ["DeciderCompleted", "Marker", close_event]
    assert run.state.status == status


@pytest.mark.parametrize(
    "non_trigger",
    [
        lambda r: r.poll_activity("a"),
    ],
    ids=["ActivityStarted"],
)
def test_non_trigger_mid_decision_does_not_block_a_close(
    non_trigger: Callable[[Run], object],
) -> None:
    run = started()
    run.step(schedule_activity("a"))
    run.signal()
    token = run.poll_decision()
    non_trigger(run)
    run.decide(token, complete_workflow())
    assert run.types[-1] == "WorkflowSuccess"

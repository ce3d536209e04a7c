"""Helpers shared by the engine's decision-task tests (test_engine_decider*.py,
test_engine_decisions.py, test_engine_closes_and_limits.py)."""

from __future__ import annotations

from orchestrator.engine.tokens import TaskToken

from .builder import Run


def decider_turn(run: Run) -> TaskToken:
    """Take a decision task, scheduling one with a signal if none is outstanding."""
    if not run.state.decider.scheduled_id:
        run.signal("wake")
    return run.poll_decision()


def outstanding(run: Run) -> tuple[int, int]:
    """(DeciderScheduled not yet started, DeciderStarted not yet ended), from history alone."""
    scheduled: set[int] = set()
    running: set[int] = set()
    for e in run.history:
        if e.type == "DeciderScheduled":
            scheduled.add(e.event_id)
        elif e.type == "DeciderStarted":
            scheduled.discard(e.decider_started.scheduled_event_id)
            running.add(e.event_id)
        elif e.type == "DeciderCompleted":
            running.discard(e.decider_completed.started_event_id)
        elif e.type == "DeciderTimedOut":
            running.discard(e.decider_timed_out.started_event_id)
        elif e.type == "DeciderFailed":
            running.discard(e.decider_failed.started_event_id)
    return len(scheduled), len(running)

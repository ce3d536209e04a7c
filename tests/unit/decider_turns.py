"""Helpers shared by the engine's decision-task tests (tests/unit/test_engine_decisions.py,
tests/unit/test_engine_closes_and_limits.py)."""

from __future__ import annotations

from orchestrator.engine.tokens import TaskToken

from .builder import Run


def decider_turn(run: Run) -> TaskToken:
    """Take a decision task, scheduling one with a signal if none is outstanding."""
    if not run.state.decider.scheduled_id:
        run.signal("wake")
    return run.poll_decision()

"""The bound on a run's heartbeat details at its edge: a total of exactly
`HEARTBEAT_DETAILS_PER_RUN` is taken, one byte more is refused before anything
changes, and details no larger than those they replace are taken even in a run
stored over the bound (before it existed)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from orchestrator.engine import activity as activities
from orchestrator.engine.errors import ResourceExhausted
from orchestrator.engine.limits import HEARTBEAT_DETAILS_PER_RUN
from orchestrator.engine.state import ActivityState, RunKey, RunState
from orchestrator.engine.tokens import TaskToken
from orchestrator.engine.transition import Transition
from sdk.api.weft.v1 import common_pb2 as c

KEY = RunKey("default", "wf", "run-1")


def _run(held: int) -> RunState:
    """A run with two started activities, "a" holding `held` bytes of details."""
    state = RunState.blank(KEY)
    for n, activity_id in enumerate(("a", "b"), start=1):
        state.activities[activity_id] = ActivityState(
            activity_id, "work", "", "tl", n, 0.0, None, None, None, None, started_id=10 + n
        )
    state.activities["a"].heartbeat_details = base64.b64encode(b"h" * held).decode()
    return state


def _details(size: int) -> c.Payload:
    """A payload that serializes to exactly `size` bytes."""
    for data in range(size, 0, -1):
        details = c.Payload(data=b"x" * data, encoding="raw")
        if len(details.SerializeToString()) == size:
            return details
    raise AssertionError(f"no payload of {size} bytes")


def _held(state: RunState, activity_id: str) -> int:
    return len(base64.b64decode(state.activities[activity_id].heartbeat_details))


def _beat(state: RunState, activity_id: str, size: int) -> Transition:
    act = state.activities[activity_id]
    token = TaskToken(KEY, "activity", act.scheduled_id, act.started_id)
    t = Transition(state, datetime.now(UTC))
    activities.heartbeat(t, token, _details(size))
    return t


def test_the_bound_is_inclusive_and_a_refusal_changes_nothing() -> None:
    held = HEARTBEAT_DETAILS_PER_RUN // 2
    state = _run(held)
    _beat(state, "b", HEARTBEAT_DETAILS_PER_RUN - held)
    assert state.activities["b"].last_heartbeat_at > 0

    state = _run(held)
    with pytest.raises(ResourceExhausted, match=str(HEARTBEAT_DETAILS_PER_RUN)) as refused:
        _beat(state, "b", HEARTBEAT_DETAILS_PER_RUN - held + 1)
    assert not refused.value.touched_state
    b = state.activities["b"]
    assert (b.heartbeat_details, b.last_heartbeat_at) == ("", 0.0)


def test_details_that_do_not_grow_the_total_are_taken_over_the_bound() -> None:
    state = _run(HEARTBEAT_DETAILS_PER_RUN + 10)
    state.activities["b"].heartbeat_details = base64.b64encode(b"h" * 2000).decode()
    _beat(state, "b", 2000)  # (no larger than its own: taken, the run still over)
    assert state.activities["b"].last_heartbeat_at > 0
    _beat(state, "a", HEARTBEAT_DETAILS_PER_RUN)  # (smaller than its own, still over: taken)
    assert _held(state, "a") == HEARTBEAT_DETAILS_PER_RUN
    _beat(state, "a", 1000)  # (the run comes back under the bound)
    assert _held(state, "a") == 1000
    with pytest.raises(ResourceExhausted):
        _beat(_run(HEARTBEAT_DETAILS_PER_RUN + 10), "b", 10)

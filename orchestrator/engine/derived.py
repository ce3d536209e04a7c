"""Tasks and deadlines as functions of run state.

The store keeps a row for each, written in the same transaction as the state,
by diffing what the old and the new state call for. So a pending activity
always has its task or its timeouts, and a stale row cannot outlive its cause.
"""

from __future__ import annotations

from dataclasses import dataclass

from .state import RunState

DECISION = "decision"
ACTIVITY = "activity"

# Deadline kinds.
WORKFLOW_TIMEOUT = "workflow"
DECIDER_START_TO_CLOSE = "decider_stc"
DECIDER_BACKOFF = "decider_backoff"
ACTIVITY_SCHEDULE_TO_START = "activity_sts"
ACTIVITY_START_TO_CLOSE = "activity_stc"
ACTIVITY_SCHEDULE_TO_CLOSE = "activity_s2c"
ACTIVITY_HEARTBEAT = "activity_hb"
TIMER = "timer"


@dataclass(frozen=True)
class LockClaim:
    """A run's row in a lock's table: its holder, or one place in its queue."""

    held: bool
    requested_id: int
    since: float
    """When it was acquired (held) or requested (waiting)."""


@dataclass(frozen=True)
class TaskRef:
    kind: str
    task_list: str
    scheduled_id: int


def tasks(state: RunState) -> set[TaskRef]:
    """Tasks waiting for a poller."""
    if not state.is_open:
        return set()
    out: set[TaskRef] = set()
    d = state.decider
    if d.retry_pending:
        # A failed attempt is handed out again after its backoff: the queued
        # DeciderScheduled if events came in since, else the same task.
        if not d.backoff_until:
            out.add(TaskRef(DECISION, state.task_list, d.scheduled_id or d.started_scheduled_id))
    # A queued DeciderScheduled is handed out only once the started task ends.
    elif d.scheduled_id and not d.started_id:
        out.add(TaskRef(DECISION, state.task_list, d.scheduled_id))
    for act in state.activities.values():
        if not act.started_id and not act.cancel_requested_id:
            out.add(TaskRef(ACTIVITY, act.task_list, act.scheduled_id))
    return out


def deadlines(state: RunState) -> dict[tuple[str, int], float]:
    """(kind, reference event id) -> due time (epoch seconds)."""
    if not state.is_open:
        return {}
    out: dict[tuple[str, int], float] = {
        (WORKFLOW_TIMEOUT, 1): state.started_at + state.execution_timeout
    }
    d = state.decider
    if d.retry_pending:
        if d.backoff_until:
            out[(DECIDER_BACKOFF, d.started_id)] = d.backoff_until
    elif d.started_id:
        began = d.attempt_started_at or d.started_at
        out[(DECIDER_START_TO_CLOSE, d.started_id)] = began + state.decider_timeout
    for act in state.activities.values():
        if act.schedule_to_close is not None:
            out[(ACTIVITY_SCHEDULE_TO_CLOSE, act.scheduled_id)] = (
                act.scheduled_at + act.schedule_to_close
            )
        if not act.started_id:
            if act.schedule_to_start is not None:
                out[(ACTIVITY_SCHEDULE_TO_START, act.scheduled_id)] = (
                    act.scheduled_at + act.schedule_to_start
                )
            continue
        if act.start_to_close is not None:
            out[(ACTIVITY_START_TO_CLOSE, act.started_id)] = act.started_at + act.start_to_close
        if act.heartbeat is not None:
            last = max(act.started_at, act.last_heartbeat_at)
            out[(ACTIVITY_HEARTBEAT, act.started_id)] = last + act.heartbeat
    for timer in state.timers.values():
        out[(TIMER, timer.started_id)] = timer.fire_at
    return out


def lock_claims(state: RunState) -> dict[str, LockClaim]:
    """Lock name -> this run's claim on it. A closed run claims nothing: its
    close released what it held and withdrew what it awaited."""
    if not state.is_open:
        return {}
    return {
        name: LockClaim(
            held=lock.held,
            requested_id=lock.requested_id,
            since=lock.acquired_at if lock.held else lock.requested_at,
        )
        for name, lock in state.locks.items()
    }

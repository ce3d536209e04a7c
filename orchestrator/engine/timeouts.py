"""Deadlines falling due: timeouts and user timers become ordinary events.

The scanner hands every due deadline row here; the engine recomputes the run's
deadlines from its state and acts only if this one is still wanted and due, so
a stale row (the task finished, a heartbeat moved it) is a no-op, and two nodes
firing the same row append one event.
"""

from __future__ import annotations

from sdk.api.weft.v1 import history_pb2 as h

from . import decider_attempts as attempts
from . import derived
from .activity import last_heartbeat
from .state import ActivityState, RunState
from .transition import Transition

_SLACK = 0.001  # due times go through the database at microsecond precision


def _by_started(state: RunState, started_id: int) -> ActivityState:
    return next(a for a in state.activities.values() if a.started_id == started_id)


WORKER_LOST = "WORKER_LOST"


def worker_lost(t: Transition, session_id: str, identity: str) -> bool:
    """The worker session `session_id` expired or ended: time out at once every
    task of this run it had started (a decider sees WORKER_LOST like any other
    timeout). False if it had none here any more."""
    s = t.state
    if not s.is_open:
        return False
    lost = False
    for act in list(s.activities.values()):
        if not act.started_id or act.session != session_id:
            continue
        attrs = h.ActivityTimedOutAttributes(
            scheduled_event_id=act.scheduled_id,
            started_event_id=act.started_id,
            timeout_type=WORKER_LOST,
            identity=identity,
            worker_session_id=session_id,
        )
        details = last_heartbeat(act)
        if details is not None:
            attrs.details.CopyFrom(details)
        t.emit(attrs)
        lost = True
    d = s.decider
    if d.started_id and not d.retry_pending and d.started_session == session_id:
        if attempts.retried_quietly(t):
            attempts.park(t, WORKER_LOST, f"the session of {identity} expired")
        else:
            t.emit(
                h.DeciderTimedOutAttributes(
                    scheduled_event_id=d.started_scheduled_id,
                    started_event_id=d.started_id,
                    timeout_type=WORKER_LOST,
                    identity=identity,
                    worker_session_id=session_id,
                )
            )
        lost = True
    return lost


def fire_deadline(t: Transition, kind: str, ref_id: int) -> bool:
    s = t.state
    due = derived.deadlines(s).get((kind, ref_id))
    if due is None or due > t.now.timestamp() + _SLACK:
        return False
    if kind == derived.WORKFLOW_TIMEOUT:
        t.emit(h.WorkflowTimedOutAttributes(timeout_type="START_TO_CLOSE"))
    elif kind == derived.DECIDER_BACKOFF:
        s.decider.backoff_until = 0.0
        t.state_changed = True
    elif kind == derived.DECIDER_START_TO_CLOSE and attempts.retried_quietly(t):
        attempts.park(t, attempts.TIMEOUT, "")
    elif kind == derived.DECIDER_START_TO_CLOSE:
        t.emit(
            h.DeciderTimedOutAttributes(
                scheduled_event_id=s.decider.started_scheduled_id,
                started_event_id=ref_id,
                timeout_type="START_TO_CLOSE",
            )
        )
    elif kind == derived.ACTIVITY_SCHEDULE_TO_START:
        t.emit(
            h.ActivityScheduledTimeoutAttributes(
                scheduled_event_id=ref_id, timeout_type="SCHEDULE_TO_START"
            )
        )
    elif kind == derived.TIMER:
        timer = next(x for x in s.timers.values() if x.started_id == ref_id)
        t.emit(h.TimerExpiredAttributes(timer_id=timer.timer_id, started_event_id=ref_id))
    else:
        if kind == derived.ACTIVITY_SCHEDULE_TO_CLOSE:
            act = s.activity_by_scheduled_id(ref_id)
            assert act is not None
            timeout_type = "SCHEDULE_TO_CLOSE"
        else:
            act = _by_started(s, ref_id)
            timeout_type = "HEARTBEAT" if kind == derived.ACTIVITY_HEARTBEAT else "START_TO_CLOSE"
        attrs = h.ActivityTimedOutAttributes(
            scheduled_event_id=act.scheduled_id,
            started_event_id=act.started_id,
            timeout_type=timeout_type,
        )
        details = last_heartbeat(act)
        if details is not None:
            attrs.details.CopyFrom(details)
        t.emit(attrs)
    return True

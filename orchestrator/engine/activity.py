"""Activity tasks: handing one out, and a runner's answers."""

from __future__ import annotations

import base64

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import history_pb2 as h

from .errors import NotFound, ResourceExhausted, untouched
from .limits import HEARTBEAT_DETAILS_PER_RUN
from .state import ActivityState, RunState
from .tokens import TaskToken, check_open
from .transition import Transition


def start_activity_task(
    t: Transition, scheduled_id: int, identity: str, session: str = ""
) -> ActivityState:
    check_open(t.state)
    act = t.state.activity_by_scheduled_id(scheduled_id)
    if act is None or act.started_id or act.cancel_requested_id:
        raise NotFound("activity task is no longer available")
    t.emit(
        h.ActivityStartedAttributes(
            scheduled_event_id=scheduled_id,
            identity=identity,
            attempt=1,
            worker_session_id=session,
        )
    )
    return act


def _current(state: RunState, token: TaskToken) -> ActivityState:
    check_open(state)
    act = state.activity_by_scheduled_id(token.scheduled_id)
    if act is None or not act.started_id or act.started_id != token.started_id:
        raise NotFound("activity task not found: it already finished, timed out or was canceled")
    return act


def complete(t: Transition, token: TaskToken, result: c.Payload | None, identity: str) -> None:
    _current(t.state, token)
    attrs = h.ActivitySuccessAttributes(
        scheduled_event_id=token.scheduled_id,
        started_event_id=token.started_id,
        identity=identity,
    )
    if result is not None:
        attrs.result.CopyFrom(result)
    t.emit(attrs)


def fail(
    t: Transition,
    token: TaskToken,
    reason: str,
    details: c.Payload | None,
    non_retryable: bool,
    identity: str,
) -> None:
    _current(t.state, token)
    attrs = h.ActivityFailedAttributes(
        scheduled_event_id=token.scheduled_id,
        started_event_id=token.started_id,
        reason=reason,
        non_retryable=non_retryable,
        identity=identity,
    )
    if details is not None:
        attrs.details.CopyFrom(details)
    t.emit(attrs)


def canceled(t: Transition, token: TaskToken, details: c.Payload | None, identity: str) -> None:
    act = _current(t.state, token)
    attrs = h.ActivityCanceledAttributes(
        scheduled_event_id=token.scheduled_id,
        started_event_id=token.started_id,
        latest_cancel_requested_event_id=act.cancel_requested_id,
        identity=identity,
    )
    if details is not None:
        attrs.details.CopyFrom(details)
    t.emit(attrs)


def heartbeat(t: Transition, token: TaskToken, details: c.Payload | None) -> bool:
    """Record a heartbeat (state only: heartbeats are not events); True if cancel was requested."""
    act = _current(t.state, token)
    if details is not None:
        raw = details.SerializeToString()
        _check_details_total(t.state, act, len(raw))
        act.heartbeat_details = base64.b64encode(raw).decode()
    act.last_heartbeat_at = t.now.timestamp()
    t.state_changed = True
    return bool(act.cancel_requested_id)


def _check_details_total(state: RunState, act: ActivityState, size: int) -> None:
    """Refuse details that would take the run's heartbeat details past their
    bound (`HEARTBEAT_DETAILS_PER_RUN`), before anything is changed: the
    heartbeat is then not recorded."""
    others = sum(
        _decoded_size(a.heartbeat_details) for a in state.activities.values() if a is not act
    )
    # (Details that do not grow the run's total are taken: a run stored over the
    # bound, before it existed, can still come down under it.)
    if others + size > HEARTBEAT_DETAILS_PER_RUN and size > _decoded_size(act.heartbeat_details):
        raise untouched(
            ResourceExhausted(
                f"heartbeat details of {size} bytes would take the run's pending activities'"
                f" details to {others + size} bytes: the limit is {HEARTBEAT_DETAILS_PER_RUN}"
                " bytes (heartbeat with smaller details, or none)"
            )
        )


def _decoded_size(encoded: str) -> int:
    return len(encoded) // 4 * 3 - encoded[-2:].count("=")


def last_heartbeat(act: ActivityState) -> c.Payload | None:
    if not act.heartbeat_details:
        return None
    return c.Payload.FromString(base64.b64decode(act.heartbeat_details))

"""History events: construction, their CONTRACT.md names, and `evolve`, the fold
that turns a history into a `RunState`.

`evolve` is the only place run state changes in response to an event, so the
state stored on the run row is by construction the fold of its history.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from sdk import stamps
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import history_pb2 as h

from . import retention
from .state import (
    CLOSED_STATUSES,
    DECIDER_TIMEOUT,
    ActivityState,
    ChildState,
    LockState,
    RunKey,
    RunState,
    TimerState,
)

_ONEOF = h.HistoryEvent.DESCRIPTOR.oneofs_by_name["attributes"]


def _camel(field_name: str) -> str:
    return "".join(part.capitalize() for part in field_name.split("_"))


# attributes message name -> (oneof field name, event type name)
_BY_MESSAGE: dict[str, tuple[str, str]] = {
    f.message_type.name: (f.name, _camel(f.name)) for f in _ONEOF.fields if f.message_type
}
EVENT_TYPES: frozenset[str] = frozenset(t for _, t in _BY_MESSAGE.values())

# Events after which the service appends DeciderScheduled if none is outstanding
# (CONTRACT.md "trigger"); DeciderTimedOut/DeciderFailed reschedule the same way.
TRIGGERS: frozenset[str] = frozenset(
    {
        "WorkflowCancelRequested",
        "WorkflowCloseFailed",
        "DeciderTimedOut",
        "DeciderFailed",
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
        "RequestLockFailed",
        "ReleaseLockFailed",
        "StartChildWorkflowFailed",
        "ChildWorkflowSuccess",
        "ChildWorkflowFailed",
        "ChildWorkflowTimedOut",
        "ChildWorkflowCanceled",
        "ChildWorkflowTerminated",
        "SignalExternalWorkflowFailed",
        "ReplayRequested",
    }
)
CHILD_CLOSES: frozenset[str] = frozenset(
    {
        "ChildWorkflowSuccess",
        "ChildWorkflowFailed",
        "ChildWorkflowTimedOut",
        "ChildWorkflowCanceled",
        "ChildWorkflowTerminated",
    }
)

CLOSE_EVENTS: dict[str, str] = {
    "WorkflowSuccess": "completed",
    "WorkflowFailed": "failed",
    "WorkflowCanceled": "canceled",
    "WorkflowTerminated": "terminated",
    "WorkflowContinuedAsNew": "continued_as_new",
    "WorkflowTimedOut": "timed_out",
}
assert set(CLOSE_EVENTS.values()) == set(CLOSED_STATUSES)


RETENTION_MARKER = "retention"
"""A Marker of this name sets the run's retention policy: details {"retention": TEXT}."""


def retention_text(details: c.Payload) -> str:
    """The policy text a retention marker carries; ValueError if it carries none."""
    try:
        doc = json.loads(details.data or b"null")
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("retention"), str):
        raise ValueError('details must be {"retention": "POLICY"}')
    text: str = doc["retention"]
    return text


def _set_retention(state: RunState, details: c.Payload) -> None:
    # Checked when the marker was decided (decisions.py), so it parses here.
    parsed = retention.parse(retention_text(details))
    previous = retention.parse(state.retention).policy
    state.retention = retention.render(retention.substitute_context(parsed.policy, previous))
    if parsed.hash:
        state.retention_hash = parsed.hash


def make_event(event_id: int, now: datetime, attributes: Message) -> h.HistoryEvent:
    field_name, type_name = _BY_MESSAGE[attributes.DESCRIPTOR.name]
    event = h.HistoryEvent(event_id=event_id, type=type_name)
    stamps.set_datetime(event.timestamp, now)
    getattr(event, field_name).CopyFrom(attributes)
    return event


def attributes_of(event: h.HistoryEvent) -> Message:
    name = event.WhichOneof("attributes")
    assert name is not None, f"event {event.event_id} has no attributes"
    attrs: Message = getattr(event, name)
    return attrs


def epoch(event: h.HistoryEvent) -> float:
    return stamps.to_epoch(event.timestamp)


def _seconds(duration: Duration) -> float:
    return duration.ToTimedelta().total_seconds()


def _opt_seconds(msg: Message, field_name: str) -> float | None:
    return _seconds(getattr(msg, field_name)) if msg.HasField(field_name) else None


def fold(key: RunKey, events: list[h.HistoryEvent]) -> RunState:
    """Rebuild a run's state from its history alone."""
    state = RunState.blank(key)
    for event in events:
        evolve(state, event)
    return state


def evolve(state: RunState, event: h.HistoryEvent) -> None:
    """Apply one event to the state, in place."""
    if event.event_id != state.next_event_id:
        raise AssertionError(f"event id {event.event_id} after {state.next_event_id - 1}")
    state.next_event_id += 1
    at = epoch(event)
    t = event.type
    d = state.decider
    if t == "WorkflowStarted":
        a = event.workflow_started
        state.type_name, state.type_version = a.workflow_type.name, a.workflow_type.version
        state.task_list = a.task_list
        state.started_at = at
        state.execution_timeout = _seconds(a.execution_timeout)
        state.decider_timeout = _seconds(a.decider_timeout)
        state.continued_from_run_id = a.continued_from_run_id
        state.parent_workflow_id, state.parent_run_id = a.parent_workflow_id, a.parent_run_id
        state.parent_started_id = a.parent_started_event_id
        state.replay_of_run_id = a.replay_of_run_id
        state.started_by = event.principal
        if a.retention:
            state.retention, state.retention_hash = a.retention, a.retention_hash
        for carried in a.carried_locks:
            # Taken over from the run this one continues: the store moved its
            # row (holder, or place in the queue) to this run in the same commit.
            since = carried.since.ToDatetime(tzinfo=UTC).timestamp()
            state.locks[carried.lock_name] = LockState(
                lock_name=carried.lock_name,
                requested_id=event.event_id,
                requested_at=since,
                acquired_id=event.event_id if carried.held else 0,
                acquired_at=since if carried.held else 0.0,
            )
    elif t == "DeciderScheduled":
        d.scheduled_id = event.event_id
    elif t == "DeciderStarted":
        d.started_id, d.started_at = event.event_id, at
        d.started_scheduled_id = event.decider_started.scheduled_event_id
        d.scheduled_id = 0
        d.attempt = max(1, event.decider_started.attempt)
        d.retry_pending, d.backoff_until, d.attempt_started_at = False, 0.0, 0.0
    elif t == "DeciderCompleted":
        d.previous_started_id = d.started_id
        d.started_id = d.started_scheduled_id = 0
        d.started_at = 0.0
        d.attempt, d.failure_cause, d.failure_message = 1, "", ""
    elif t in ("DeciderTimedOut", "DeciderFailed"):
        d.started_id = d.started_scheduled_id = 0
        d.started_at = 0.0
        d.attempt += 1
        if t == "DeciderFailed":
            d.failure_cause = event.decider_failed.cause
        elif event.decider_timed_out.timeout_type == "WORKER_LOST":
            d.failure_cause = "WORKER_LOST"
        else:
            d.failure_cause = DECIDER_TIMEOUT
    elif t == "ActivityScheduled":
        s = event.activity_scheduled
        state.activities[s.activity_id] = ActivityState(
            activity_id=s.activity_id,
            type_name=s.activity_type.name,
            type_version=s.activity_type.version,
            task_list=s.task_list,
            scheduled_id=event.event_id,
            scheduled_at=at,
            schedule_to_start=_opt_seconds(s, "schedule_to_start_timeout"),
            start_to_close=_opt_seconds(s, "start_to_close_timeout"),
            schedule_to_close=_opt_seconds(s, "schedule_to_close_timeout"),
            heartbeat=_opt_seconds(s, "heartbeat_timeout"),
        )
    elif t == "ActivityStarted":
        act = state.activity_by_scheduled_id(event.activity_started.scheduled_event_id)
        assert act is not None
        act.started_id, act.started_at = event.event_id, at
        act.identity = event.activity_started.identity
        act.principal = event.principal
        act.session = event.activity_started.worker_session_id
    elif t == "ActivityCancelRequested":
        state.activities[
            event.activity_cancel_requested.activity_id
        ].cancel_requested_id = event.event_id
    elif t in (
        "ActivitySuccess",
        "ActivityFailed",
        "ActivityTimedOut",
        "ActivityScheduledTimeout",
        "ActivityCanceled",
    ):
        scheduled_id = getattr(attributes_of(event), "scheduled_event_id")  # noqa: B009
        act = state.activity_by_scheduled_id(scheduled_id)
        assert act is not None
        del state.activities[act.activity_id]
    elif t == "TimerScheduled":
        s2 = event.timer_scheduled
        state.timers[s2.timer_id] = TimerState(
            timer_id=s2.timer_id,
            started_id=event.event_id,
            fire_at=at + _seconds(s2.start_to_fire_timeout),
        )
    elif t == "TimerExpired":
        del state.timers[event.timer_expired.timer_id]
    elif t == "TimerCanceled":
        del state.timers[event.timer_canceled.timer_id]
    elif t == "Signal":
        state.signals += 1
    elif t == "Marker" and event.marker.marker_name == RETENTION_MARKER:
        _set_retention(state, event.marker.details)
    elif t == "LockRequested":
        name = event.lock_requested.lock_name
        state.locks[name] = LockState(lock_name=name, requested_id=event.event_id, requested_at=at)
    elif t == "LockAcquired":
        lock = state.locks[event.lock_acquired.lock_name]
        lock.acquired_id, lock.acquired_at = event.event_id, at
    elif t == "LockReleased":
        del state.locks[event.lock_released.lock_name]
    elif t == "ChildWorkflowStarted":
        cs = event.child_workflow_started
        state.children[cs.workflow_id] = ChildState(
            workflow_id=cs.workflow_id,
            run_id=cs.run_id,
            started_id=event.event_id,
            parent_close_policy=cs.parent_close_policy,
        )
    elif t in CHILD_CLOSES:
        state.children.pop(getattr(attributes_of(event), "workflow_id"), None)  # noqa: B009
    elif t == "WorkflowCancelRequested":
        state.cancel_requested = True
    elif t in CLOSE_EVENTS:
        state.status = CLOSE_EVENTS[t]
        state.closed_at = at
        # Pending work is abandoned with the run: nothing of it may be handed out
        # or time out any more.
        state.decider = type(d)(previous_started_id=d.previous_started_id)
        state.activities.clear()
        state.timers.clear()
        state.locks.clear()  # the close releases them (the store grants them on)
        state.children.clear()  # their policies: children.children_to_close, applied by the store
        if t == "WorkflowContinuedAsNew":
            state.continued_as_new_run_id = event.workflow_continued_as_new.new_run_id

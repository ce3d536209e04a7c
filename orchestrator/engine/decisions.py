"""Decision tasks: handing one out, and applying a decider's answer (SWF rules)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h

from . import children, locks, retention
from . import decider_attempts as attempts
from .context import DecisionContext
from .defaults import RegisteredActivityType, first_given
from .errors import InvalidArgument, NotFound, ResourceExhausted
from .events import RETENTION_MARKER, retention_text
from .limits import Limits
from .start import StartCommand, opened_run
from .state import RunKey, RunState
from .tokens import TaskToken, check_open
from .transition import Transition, duration

# Events by which the service refuses a decision.
_FAILED = frozenset(
    {
        "ActivityScheduleFailed",
        "ActivityCancelFailed",
        "TimerScheduleFailed",
        "TimerCancelFailed",
        "MarkerFailed",
        "RequestLockFailed",
        "ReleaseLockFailed",
        "StartChildWorkflowFailed",
        "SignalExternalWorkflowFailed",
    }
)
CLOSE_DECISIONS: Mapping[str, str] = {
    "complete_workflow": "CompleteWorkflow",
    "fail_workflow": "FailWorkflow",
    "cancel_workflow": "CancelWorkflow",
    "continue_as_new": "ContinueAsNew",
}
_TIMEOUT_FIELDS = ("schedule_to_start", "start_to_close", "schedule_to_close", "heartbeat")


def start_decision_task(t: Transition, scheduled_id: int, identity: str, session: str = "") -> int:
    """Hand out the decision task `scheduled_id`; the id of its DeciderStarted.
    `session`: the worker session of the decider taking it ("" for none)."""
    check_open(t.state)
    dec = t.state.decider
    if dec.retry_pending:
        if dec.backoff_until or scheduled_id != (dec.scheduled_id or dec.started_scheduled_id):
            raise NotFound("decision task is no longer available")
        if not dec.scheduled_id:
            # Nothing came in that the decider must see: the same window again.
            dec.started_session = session
            return attempts.hand_out_again(t)
    elif dec.started_id or dec.scheduled_id != scheduled_id:
        raise NotFound("decision task is no longer available")
    dec.started_session = session
    return t.emit(
        h.DeciderStartedAttributes(
            # Only a retry says so: the usual history stays as SWF writes it.
            scheduled_event_id=scheduled_id,
            identity=identity,
            attempt=dec.attempt if dec.attempt > 1 else 0,
        )
    ).event_id


def _check_token(state: RunState, token: TaskToken) -> None:
    check_open(state)
    dec = state.decider
    if not (
        dec.started_id
        and not dec.retry_pending
        and dec.started_id == token.started_id
        and dec.started_scheduled_id == token.scheduled_id
        and dec.attempt == token.attempt
    ):
        raise NotFound("decision task not found: it was already answered or has timed out")


def fail_decision_task(
    t: Transition, token: TaskToken, cause: str, details: c.Payload | None, identity: str
) -> None:
    _check_token(t.state, token)
    if attempts.retried_quietly(t):
        message = attempts.details_message(details.data) if details is not None else ""
        attempts.park(t, cause or "UNHANDLED_FAILURE", message)
        return
    attrs = h.DeciderFailedAttributes(
        scheduled_event_id=token.scheduled_id,
        started_event_id=token.started_id,
        cause=cause or "UNHANDLED_FAILURE",
        identity=identity,
    )
    if details is not None:
        attrs.details.CopyFrom(details)
    t.emit(attrs)


def validate_decisions(decisions: Sequence[d.Decision], limits: Limits) -> None:
    """Structural checks, before anything is appended: a bad answer changes nothing."""
    for i, dec in enumerate(decisions):
        kind = dec.WhichOneof("attributes")
        where = f"decision {i}"
        if kind is None:
            raise InvalidArgument(f"{where}: no decision attributes set")
        where = f"decision {i} ({kind})"
        if kind in CLOSE_DECISIONS and i != len(decisions) - 1:
            raise InvalidArgument(f"{where}: a close decision must be the last one")
        attrs: Message = getattr(dec, kind)
        for id_field in ("activity_id", "timer_id", "marker_name"):
            if id_field in attrs.DESCRIPTOR.fields_by_name:
                value = getattr(attrs, id_field)
                if not value:
                    raise InvalidArgument(f"{where}: {id_field} is required")
                if len(value) > limits.id_length:
                    raise InvalidArgument(
                        f"{where}: {id_field} is longer than {limits.id_length} characters"
                    )
        for fd, value in attrs.ListFields():
            if fd.message_type is None or fd.message_type.full_name != "google.protobuf.Duration":
                continue
            # A timer may fire at once; a zero timeout would expire the moment it starts.
            if fd.name == "start_to_fire_timeout":
                if value.ToNanoseconds() < 0:
                    raise InvalidArgument(f"{where}: {fd.name} must not be negative")
            elif value.ToNanoseconds() <= 0:
                raise InvalidArgument(f"{where}: {fd.name} must be positive")
        if kind == "schedule_activity" and not dec.schedule_activity.activity_type.name:
            raise InvalidArgument(f"{where}: activity_type.name is required")
        if kind == "start_timer" and not dec.start_timer.HasField("start_to_fire_timeout"):
            raise InvalidArgument(f"{where}: start_to_fire_timeout is required")
        if kind == "start_child_workflow":
            child = dec.start_child_workflow
            _check_id(where, "workflow_id", child.workflow_id, limits)
            if not child.workflow_type.name:
                raise InvalidArgument(f"{where}: workflow_type.name is required")
            if child.parent_close_policy not in children.POLICIES:
                raise InvalidArgument(f"{where}: unknown parent_close_policy")
        if kind == "signal_external_workflow":
            sig = dec.signal_external_workflow
            _check_id(where, "execution.workflow_id", sig.execution.workflow_id, limits)
            if not sig.signal_name:
                raise InvalidArgument(f"{where}: signal_name is required")
        if kind == "continue_as_new" and any(not n for n in dec.continue_as_new.carried_locks):
            raise InvalidArgument(f"{where}: carried_locks has an empty lock name")
        if kind in ("request_lock", "release_lock"):
            lock_name = getattr(attrs, "lock_name")  # noqa: B009
            if not lock_name:
                raise InvalidArgument(f"{where}: lock_name is required")
            if len(lock_name) > locks.MAX_LOCK_NAME:
                raise InvalidArgument(
                    f"{where}: lock_name is longer than {locks.MAX_LOCK_NAME} characters"
                )
            if any(ord(ch) < 32 or ord(ch) == 127 for ch in lock_name):
                raise InvalidArgument(f"{where}: lock_name contains control characters")


def _check_id(where: str, name: str, value: str, limits: Limits) -> None:
    if not value:
        raise InvalidArgument(f"{where}: {name} is required")
    if len(value) > limits.id_length:
        raise InvalidArgument(f"{where}: {name} is longer than {limits.id_length} characters")


def _check_limits(state: RunState, decisions: Sequence[d.Decision], limits: Limits) -> None:
    kinds = [dec.WhichOneof("attributes") for dec in decisions]
    events_after = state.next_event_id - 1 + 1 + 2 * len(decisions)
    if any(k not in CLOSE_DECISIONS for k in kinds) and events_after > limits.events_per_run:
        raise ResourceExhausted(
            f"run has {state.next_event_id - 1} events: the limit is {limits.events_per_run};"
            " only a close decision (e.g. ContinueAsNew) is accepted now"
        )
    if len(state.activities) + kinds.count("schedule_activity") > limits.pending_activities:
        raise ResourceExhausted(f"more than {limits.pending_activities} pending activities")
    if len(state.timers) + kinds.count("start_timer") > limits.pending_timers:
        raise ResourceExhausted(f"more than {limits.pending_timers} pending timers")


def complete_decision_task(
    t: Transition,
    token: TaskToken,
    decisions: Sequence[d.Decision],
    identity: str,
    ctx: DecisionContext,
    cache_id: str = "",
) -> None:
    _check_token(t.state, token)
    validate_decisions(decisions, ctx.limits)
    _check_limits(t.state, decisions, ctx.limits)
    completed = t.emit(
        h.DeciderCompletedAttributes(
            scheduled_event_id=token.scheduled_id,
            started_event_id=token.started_id,
            identity=identity,
        )
    ).event_id
    # Its next task of this run need carry only what that cache has not seen.
    t.state.decider.cached_by = cache_id
    # A DeciderScheduled queued behind this task means events arrived that this
    # decider has not seen: a close now could lose them (SWF's unhandled decision).
    unseen = bool(t.state.decider.scheduled_id)
    first = len(t.events)
    for dec in decisions:
        kind = dec.WhichOneof("attributes")
        assert kind is not None
        if kind in CLOSE_DECISIONS:
            # So is a decision of this batch that failed: the decider has not
            # seen its ...Failed event, and closing would hide it for good. (What
            # the batch itself caused, like ActivityCanceled, the decider asked for.)
            if unseen or any(e.type in _FAILED for e in t.events[first:]):
                t.emit(
                    h.WorkflowCloseFailedAttributes(
                        decision_type=CLOSE_DECISIONS[kind],
                        cause="UNHANDLED_EVENTS",
                        decider_completed_event_id=completed,
                    )
                )
            else:
                _close(t, dec, kind, completed, ctx)
        else:
            _APPLY[kind](t, getattr(dec, kind), completed, ctx)


def _schedule_activity(
    t: Transition, a: d.ScheduleActivityDecision, completed: int, ctx: DecisionContext
) -> None:
    s = t.state
    if a.activity_id in s.activities:
        t.emit(
            h.ActivityScheduleFailedAttributes(
                activity_id=a.activity_id,
                activity_type=a.activity_type,
                cause="DUPLICATE_ACTIVITY_ID",
                decider_completed_event_id=completed,
            )
        )
        return
    registered = ctx.activity_types.get(
        (a.activity_type.name, a.activity_type.version), RegisteredActivityType()
    )
    attrs = h.ActivityScheduledAttributes(
        activity_id=a.activity_id,
        activity_type=a.activity_type,
        task_list=first_given(a.task_list, registered.task_list, s.task_list),
        decider_completed_event_id=completed,
    )
    if a.HasField("input"):
        attrs.input.CopyFrom(a.input)
    for name in _TIMEOUT_FIELDS:
        proto_field = f"{name}_timeout"
        if a.HasField(proto_field):  # type: ignore[arg-type]
            # The request's own, copied exactly (first in the precedence).
            getattr(attrs, proto_field).CopyFrom(getattr(a, proto_field))
            continue
        server = ctx.defaults.activity_start_to_close if name == "start_to_close" else None
        seconds: float | None = first_given(None, getattr(registered, name), server)
        if seconds is not None:
            getattr(attrs, proto_field).CopyFrom(duration(seconds))
    t.emit(attrs)


def _request_cancel_activity(
    t: Transition, a: d.RequestCancelActivityDecision, completed: int, ctx: DecisionContext
) -> None:
    act = t.state.activities.get(a.activity_id)
    if act is None:
        t.emit(
            h.ActivityCancelFailedAttributes(
                activity_id=a.activity_id,
                cause="ACTIVITY_ID_UNKNOWN",
                decider_completed_event_id=completed,
            )
        )
        return
    requested = t.emit(
        h.ActivityCancelRequestedAttributes(
            activity_id=a.activity_id, decider_completed_event_id=completed
        )
    ).event_id
    if not act.started_id:
        # No runner has it yet: cancel at once instead of waiting for one.
        t.emit(
            h.ActivityCanceledAttributes(
                scheduled_event_id=act.scheduled_id, latest_cancel_requested_event_id=requested
            )
        )


def _start_timer(
    t: Transition, a: d.StartTimerDecision, completed: int, ctx: DecisionContext
) -> None:
    if a.timer_id in t.state.timers:
        t.emit(
            h.TimerScheduleFailedAttributes(
                timer_id=a.timer_id,
                cause="TIMER_ID_ALREADY_IN_USE",
                decider_completed_event_id=completed,
            )
        )
        return
    t.emit(
        h.TimerScheduledAttributes(
            timer_id=a.timer_id,
            start_to_fire_timeout=a.start_to_fire_timeout,
            decider_completed_event_id=completed,
        )
    )


def _cancel_timer(
    t: Transition, a: d.CancelTimerDecision, completed: int, ctx: DecisionContext
) -> None:
    timer = t.state.timers.get(a.timer_id)
    if timer is None:
        t.emit(
            h.TimerCancelFailedAttributes(
                timer_id=a.timer_id, cause="TIMER_ID_UNKNOWN", decider_completed_event_id=completed
            )
        )
        return
    t.emit(
        h.TimerCanceledAttributes(
            timer_id=a.timer_id,
            started_event_id=timer.started_id,
            decider_completed_event_id=completed,
        )
    )


def _record_marker(
    t: Transition, a: d.RecordMarkerDecision, completed: int, ctx: DecisionContext
) -> None:
    if a.marker_name == RETENTION_MARKER:
        try:
            retention.parse(retention_text(a.details))
        except (ValueError, InvalidArgument):
            t.emit(
                h.MarkerFailedAttributes(
                    marker_name=a.marker_name,
                    cause="INVALID_RETENTION",
                    decider_completed_event_id=completed,
                )
            )
            return
    attrs = h.MarkerAttributes(marker_name=a.marker_name, decider_completed_event_id=completed)
    if a.HasField("details"):
        attrs.details.CopyFrom(a.details)
    t.emit(attrs)


_APPLY: dict[str, Callable[[Transition, Any, int, DecisionContext], None]] = {
    "schedule_activity": _schedule_activity,
    "request_cancel_activity": _request_cancel_activity,
    "start_timer": _start_timer,
    "cancel_timer": _cancel_timer,
    "record_marker": _record_marker,
    "request_lock": locks.request_lock,
    "release_lock": locks.release_lock,
    "start_child_workflow": children.start_child,
    "signal_external_workflow": children.signal_external,
}


def _close(t: Transition, dec: d.Decision, kind: str, completed: int, ctx: DecisionContext) -> None:
    # The close event itself abandons the pending work (events.evolve).
    if kind == "complete_workflow":
        t.emit(
            h.WorkflowSuccessAttributes(
                result=dec.complete_workflow.result, decider_completed_event_id=completed
            )
        )
    elif kind == "fail_workflow":
        f = dec.fail_workflow
        t.emit(
            h.WorkflowFailedAttributes(
                reason=f.reason, details=f.details, decider_completed_event_id=completed
            )
        )
    elif kind == "cancel_workflow":
        t.emit(
            h.WorkflowCanceledAttributes(
                details=dec.cancel_workflow.details, decider_completed_event_id=completed
            )
        )
    else:
        _continue_as_new(t, dec.continue_as_new, completed, ctx)


def _continue_as_new(
    t: Transition, a: d.ContinueAsNewDecision, completed: int, ctx: DecisionContext
) -> None:
    s = t.state
    if not ctx.new_run_id:
        raise AssertionError("ContinueAsNew needs a new run id from the caller")
    carried = _carried_locks(s, a.carried_locks)
    if carried is None:
        t.emit(
            h.WorkflowCloseFailedAttributes(
                decision_type="ContinueAsNew",
                cause="LOCK_NOT_HELD",
                decider_completed_event_id=completed,
            )
        )
        return
    # A retention set in this run (a `retention` marker) goes on with the workflow.
    kept = s.retention != RunState.retention or bool(s.retention_hash)
    retention_text, retention_hash = (s.retention, s.retention_hash) if kept else ("", "")
    wtype = (
        a.workflow_type
        if a.workflow_type.name
        else c.WorkflowType(name=s.type_name, version=s.type_version)
    )
    execution = (
        a.execution_timeout.ToTimedelta().total_seconds()
        if a.HasField("execution_timeout")
        else s.execution_timeout
    )
    decider = (
        a.decider_timeout.ToTimedelta().total_seconds()
        if a.HasField("decider_timeout")
        else s.decider_timeout
    )
    cmd = StartCommand(
        type_name=wtype.name,
        type_version=wtype.version,
        task_list=a.task_list or s.task_list,
        input=a.input if a.HasField("input") else None,
        execution_timeout=execution,
        decider_timeout=decider,
        continued_from_run_id=s.run_id,
        definition=ctx.new_run_definition,
        # A child that continues as new stays its parent's child.
        parent_workflow_id=s.parent_workflow_id,
        parent_run_id=s.parent_run_id,
        parent_started_id=s.parent_started_id,
        carried_locks=carried,
        retention=retention_text,
        retention_hash=retention_hash,
    )
    t.emit(
        h.WorkflowContinuedAsNewAttributes(
            new_run_id=ctx.new_run_id,
            workflow_type=wtype,
            task_list=cmd.task_list,
            input=a.input,
            execution_timeout=duration(execution),
            decider_timeout=duration(decider),
            decider_completed_event_id=completed,
            carried_locks=carried,
            retention=retention_text,
            retention_hash=retention_hash,
        )
    )
    t.new_runs.append(opened_run(RunKey(s.namespace, s.workflow_id, ctx.new_run_id), t.now, cmd))


def _carried_locks(s: RunState, names: Sequence[str]) -> tuple[h.CarriedLock, ...] | None:
    """The locks a ContinueAsNew hands to the new run, in the order named (a name
    given twice counts once); None if the run neither holds nor awaits one of them."""
    out: list[h.CarriedLock] = []
    for name in dict.fromkeys(names):
        lock = s.locks.get(name)
        if lock is None:
            return None
        since = Timestamp()
        since.FromDatetime(
            datetime.fromtimestamp(lock.acquired_at if lock.held else lock.requested_at, UTC)
        )
        out.append(h.CarriedLock(lock_name=name, held=lock.held, since=since))
    return tuple(out)

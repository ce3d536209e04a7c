"""The determinism check: whether the decisions a decider makes now are the
ones a recorded history shows it made. Used by the step interpreter on every
replayed task, and by `sdk.testing.replay` for golden-history tests."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from sdk.converter import DEFAULT_CONVERTER
from sdk.decider import Decision
from sdk.errors import NonDeterminismError
from sdk.events import Event

# The events a decision leaves in the history, and the attribute naming what it acted on.
_RECORDED = {
    "ScheduleActivity": (("ActivityScheduled", "ActivityScheduleFailed"), "activity_id"),
    "RequestCancelActivity": (("ActivityCancelRequested", "ActivityCancelFailed"), "activity_id"),
    "StartTimer": (("TimerScheduled", "TimerScheduleFailed"), "timer_id"),
    "CancelTimer": (("TimerCanceled", "TimerCancelFailed"), "timer_id"),
    "RecordMarker": (("Marker", "MarkerFailed"), "marker_name"),
    "RequestLock": (("LockRequested", "RequestLockFailed"), "lock_name"),
    "ReleaseLock": (("LockReleased", "ReleaseLockFailed"), "lock_name"),
    "StartChildWorkflow": (("ChildWorkflowStarted", "StartChildWorkflowFailed"), "workflow_id"),
    "SignalExternalWorkflow": (
        ("ExternalWorkflowSignaled", "SignalExternalWorkflowFailed"),
        "workflow_id",
    ),
    "CompleteWorkflow": (("WorkflowSuccess", "WorkflowCloseFailed"), ""),
    "FailWorkflow": (("WorkflowFailed", "WorkflowCloseFailed"), ""),
    "CancelWorkflow": (("WorkflowCanceled", "WorkflowCloseFailed"), ""),
    "ContinueAsNew": (("WorkflowContinuedAsNew", "WorkflowCloseFailed"), ""),
}


def check_decisions(
    made: list[Decision], recorded: list[Event], at: int, *, deep: bool = False
) -> None:
    """Raise `NonDeterminismError` unless `made` are the decisions the events
    `recorded` after the `DeciderCompleted` at event `at` show (kind, id, and an
    activity's type and input).

    `deep` also compares what the other decisions carry: a marker's details, a
    timer's duration, the close decision's result (or failure reason and
    details). Off by default: a decider may legitimately record a marker whose
    details it computes afresh (a side effect it reads back on later tasks);
    deciders that recompute everything from the history, as the step
    interpreter does, turn it on."""
    where = f"decision task completed at event {at}"
    if len(made) != len(recorded):
        raise NonDeterminismError(
            f"{where}: the decider made {len(made)} decisions "
            f"({', '.join(d.kind for d in made) or 'none'}); the history records "
            f"{len(recorded)} ({', '.join(e.type for e in recorded) or 'none'})"
        )
    for i, (decision, event) in enumerate(zip(made, recorded, strict=True)):
        types, key = _RECORDED[decision.kind]
        if event.type not in types:
            raise NonDeterminismError(
                f"{where}: decision {i + 1} is {decision.kind}; the history records {event.type}"
            )
        if key and decision.attributes.get(key) != event.get(key):
            raise NonDeterminismError(
                f"{where}: decision {i + 1} ({decision.kind}) names "
                f"{decision.attributes.get(key)!r}; the history records {event.get(key)!r}"
            )
        if decision.kind == "ScheduleActivity" and event.type == "ActivityScheduled":
            same_type = decision.attributes["activity_type"] == event.get("activity_type", {}).get(
                "name"
            )
            if not same_type or _as_json(decision.attributes["input"]) != event.get("input"):
                raise NonDeterminismError(
                    f"{where}: activity {event.get('activity_id')!r} is scheduled with a "
                    "different type or input than the history records"
                )
        if deep:
            difference = _payload_difference(decision, event)
            if difference:
                raise NonDeterminismError(
                    f"{where}: decision {i + 1} ({_describe(decision)}) {difference}"
                )


# What a decision carries that its event records, by decision kind and event type:
# (the decision's attribute, the event's attribute, what to call it).
_PAYLOADS: dict[tuple[str, str], tuple[tuple[str, str, str], ...]] = {
    ("RecordMarker", "Marker"): (("details", "details", "details"),),
    ("CompleteWorkflow", "WorkflowSuccess"): (("result", "result", "result"),),
    ("FailWorkflow", "WorkflowFailed"): (
        ("reason", "reason", "reason"),
        ("details", "details", "details"),
    ),
    ("CancelWorkflow", "WorkflowCanceled"): (("details", "details", "details"),),
}


def _describe(decision: Decision) -> str:
    """A decision as a message names it: its kind and what it acts on."""
    _, key = _RECORDED[decision.kind]
    name = decision.attributes.get(key) if key else None
    return f"{decision.kind} {name!r}" if name is not None else decision.kind


def _payload_difference(decision: Decision, event: Event) -> str:
    """How what `decision` carries differs from what `event` records ('' if not)."""
    if decision.kind == "StartTimer" and event.type == "TimerScheduled":
        made = decision.attributes.get("delay")
        seconds = event.get("start_to_fire_timeout")
        span = timedelta(seconds=float(seconds)) if seconds is not None else None
        if made != span:
            shown = f"{made.total_seconds():g}s" if isinstance(made, timedelta) else repr(made)
            return f"waits {shown}; the history records {seconds!r}s"
        return ""
    for ours, theirs, what in _PAYLOADS.get((decision.kind, event.type), ()):
        value, kept = decision.attributes.get(ours), event.get(theirs)
        mine: Any
        if what == "reason":  # a plain string, omitted from the event when empty
            mine, kept = str(value or ""), str(kept or "")
        else:
            mine = _as_json(value)
        if mine != kept:
            return (
                f"carries a different {what}{_keys_differing(mine, kept)}: "
                f"{_short(mine)}; the history records {_short(kept)}"
            )
    return ""


def _keys_differing(a: Any, b: Any) -> str:
    if not isinstance(a, dict) or not isinstance(b, dict):
        return ""
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k) or (k in a) != (k in b))
    return f" ({', '.join(map(str, keys))})" if keys else ""


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_json(value: Any) -> Any:
    """A decision's value as the history would hold it (encoded, then decoded)."""
    return json.loads(DEFAULT_CONVERTER.encode(value).data)

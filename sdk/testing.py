"""Testing deciders without a server.

Build a history and decide on it:

    history = (HistoryBuilder().started({"order": 7}, workflow_type="order")
               .decision_task())
    task = decide(Order(), history.events)
    assert [d.kind for d in task.decisions] == ["ScheduleActivity", "ScheduleActivity"]

Or replay a real history (saved with `weft history ID --json`) through a
decider, checking that at every decision point it makes the decisions the
history records (a golden-history test): `replay(Order(), events_from_json(doc))`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sdk.converter import DEFAULT_CONVERTER
from sdk.decider import Decider, Decision, DecisionTask
from sdk.decider_worker import run_decider
from sdk.errors import NonDeterminismError
from sdk.events import Event

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class HistoryBuilder:
    """A history, event by event, with fixed timestamps one second apart."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self.events: list[Event] = []
        self._start = start
        self._scheduled: dict[str, int] = {}  # activity id -> its ActivityScheduled
        self._started: dict[str, int] = {}  # activity id -> its ActivityStarted
        self._timers: dict[str, int] = {}  # timer id -> its TimerScheduled
        self._decider_scheduled = 0
        self._decider_started = 0
        self._decider_completed = 0

    def add(self, type: str, **attributes: Any) -> HistoryBuilder:
        event_id = len(self.events) + 1
        stamp = self._start + timedelta(seconds=event_id - 1)
        clean = {k: v for k, v in attributes.items() if v is not None}
        self.events.append(Event(event_id, type, stamp, clean))
        return self

    @property
    def last_id(self) -> int:
        return len(self.events)

    # -- the workflow ----------------------------------------------------------------

    def started(
        self,
        input: Any = None,
        *,
        workflow_type: str = "workflow",
        version: str = "",
        task_list: str = "default",
        continued_from_run_id: str = "",
        carried_locks: Sequence[str] = (),
    ) -> HistoryBuilder:
        """`carried_locks`: locks taken over, held, from the run this one continues."""
        return self.add(
            "WorkflowStarted",
            workflow_type={"name": workflow_type, **({"version": version} if version else {})},
            task_list=task_list,
            input=input,
            execution_timeout=365 * 86400.0,
            decider_timeout=10.0,
            continued_from_run_id=continued_from_run_id or None,
            carried_locks=[{"lock_name": n, "held": True} for n in carried_locks] or None,
        )

    def cancel_requested(self, reason: str = "") -> HistoryBuilder:
        return self.add("WorkflowCancelRequested", reason=reason or None)

    def signal(self, name: str, input: Any = None, identity: str = "") -> HistoryBuilder:
        return self.add("Signal", signal_name=name, input=input, identity=identity or None)

    # -- decision tasks --------------------------------------------------------------

    def decision_task(self, identity: str = "decider") -> HistoryBuilder:
        """`DeciderScheduled` and `DeciderStarted`: a task ready to decide."""
        self.add("DeciderScheduled", task_list="default", start_to_close_timeout=10.0)
        self._decider_scheduled = self.last_id
        self.add("DeciderStarted", scheduled_event_id=self._decider_scheduled, identity=identity)
        self._decider_started = self.last_id
        return self

    def decision_completed(self, identity: str = "decider") -> HistoryBuilder:
        self.add(
            "DeciderCompleted",
            scheduled_event_id=self._decider_scheduled,
            started_event_id=self._decider_started,
            identity=identity,
        )
        self._decider_completed = self.last_id
        return self

    # -- activities -------------------------------------------------------------------

    def activity_scheduled(
        self, activity_id: str, activity_type: str, input: Any = None, task_list: str = "default"
    ) -> HistoryBuilder:
        self.add(
            "ActivityScheduled",
            activity_id=activity_id,
            activity_type={"name": activity_type},
            input=input,
            task_list=task_list,
            start_to_close_timeout=300.0,
            decider_completed_event_id=self._decider_completed or None,
        )
        self._scheduled[activity_id] = self.last_id
        return self

    def activity_schedule_failed(
        self, activity_id: str, activity_type: str, cause: str
    ) -> HistoryBuilder:
        return self.add(
            "ActivityScheduleFailed",
            activity_id=activity_id,
            activity_type={"name": activity_type},
            cause=cause,
        )

    def activity_started(
        self, activity_id: str, identity: str = "runner", attempt: int = 1
    ) -> HistoryBuilder:
        self.add(
            "ActivityStarted",
            scheduled_event_id=self._scheduled[activity_id],
            identity=identity,
            attempt=attempt,
        )
        self._started[activity_id] = self.last_id
        return self

    def activity_succeeded(self, activity_id: str, result: Any = None) -> HistoryBuilder:
        return self.add("ActivitySuccess", result=result, **self._ids(activity_id))

    def activity_failed(
        self, activity_id: str, reason: str, details: Any = None, non_retryable: bool = False
    ) -> HistoryBuilder:
        return self.add(
            "ActivityFailed",
            reason=reason,
            details=details,
            non_retryable=non_retryable or None,
            **self._ids(activity_id),
        )

    def activity_timed_out(
        self, activity_id: str, timeout_type: str = "START_TO_CLOSE", details: Any = None
    ) -> HistoryBuilder:
        return self.add(
            "ActivityTimedOut", timeout_type=timeout_type, details=details, **self._ids(activity_id)
        )

    def activity_schedule_timed_out(self, activity_id: str) -> HistoryBuilder:
        return self.add(
            "ActivityScheduledTimeout",
            scheduled_event_id=self._scheduled[activity_id],
            timeout_type="SCHEDULE_TO_START",
        )

    def activity_cancel_requested(self, activity_id: str) -> HistoryBuilder:
        return self.add("ActivityCancelRequested", activity_id=activity_id)

    def activity_canceled(self, activity_id: str, details: Any = None) -> HistoryBuilder:
        return self.add("ActivityCanceled", details=details, **self._ids(activity_id))

    def _ids(self, activity_id: str) -> dict[str, int]:
        return {
            "scheduled_event_id": self._scheduled[activity_id],
            "started_event_id": self._started.get(activity_id, 0) or 0,
        }

    # -- timers and markers ---------------------------------------------------------------

    def timer_started(self, timer_id: str, delay: timedelta) -> HistoryBuilder:
        self.add("TimerScheduled", timer_id=timer_id, start_to_fire_timeout=delay.total_seconds())
        self._timers[timer_id] = self.last_id
        return self

    def timer_schedule_failed(
        self, timer_id: str, cause: str = "TIMER_ID_ALREADY_IN_USE"
    ) -> HistoryBuilder:
        return self.add("TimerScheduleFailed", timer_id=timer_id, cause=cause)

    def timer_fired(self, timer_id: str) -> HistoryBuilder:
        return self.add("TimerExpired", timer_id=timer_id, started_event_id=self._timers[timer_id])

    def timer_canceled(self, timer_id: str) -> HistoryBuilder:
        return self.add("TimerCanceled", timer_id=timer_id, started_event_id=self._timers[timer_id])

    def marker(self, name: str, details: Any = None) -> HistoryBuilder:
        return self.add("Marker", marker_name=name, details=details)


# -- running deciders on histories ----------------------------------------------------


def task_for(history: list[Event], started_event_id: int | None = None) -> DecisionTask:
    """The decision task a decider would get at `started_event_id` (a `DeciderStarted`;
    by default the last one)."""
    starts = [e.event_id for e in history if e.type == "DeciderStarted"]
    if not starts:
        raise ValueError("the history has no DeciderStarted: add decision_task()")
    at = started_event_id if started_event_id is not None else starts[-1]
    if at not in starts:
        raise ValueError(f"event {at} is not a DeciderStarted")
    # As the server counts it: the start of the last task that completed, not
    # of one that timed out or failed.
    previous = max(
        (
            e.get("started_event_id", 0)
            for e in history
            if e.type == "DeciderCompleted" and e.event_id < at
        ),
        default=0,
    )
    first = history[0]
    kind = first.get("workflow_type", {}) if first.type == "WorkflowStarted" else {}
    return DecisionTask(
        workflow_id="test-workflow",
        run_id="test-run",
        workflow_type=kind.get("name", ""),
        version=kind.get("version", ""),
        history=[e for e in history if e.event_id <= at],
        started_event_id=at,
        previous_started_event_id=previous,
    )


def decide(
    decider: Decider, history: list[Event], started_event_id: int | None = None
) -> DecisionTask:
    """Run the decider on the task at `started_event_id` (default: the last);
    returns the task, with its `decisions`."""
    task = task_for(history, started_event_id)
    if inspect.iscoroutinefunction(decider.decide):
        asyncio.run(run_decider(decider, task))
    else:
        decider.decide(task)
    return task


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


def replay(decider: Decider, history: list[Event]) -> int:
    """Re-decide every completed decision task of a recorded history and check the
    decisions match what it recorded; returns how many tasks were checked.
    Raises `NonDeterminismError` naming the first difference."""
    checked = 0
    for completed in (e for e in history if e.type == "DeciderCompleted"):
        task = decide(decider, history, completed.get("started_event_id"))
        recorded = [e for e in history if e.get("decider_completed_event_id") == completed.event_id]
        check_decisions(task.decisions, recorded, completed.event_id)
        checked += 1
    return checked


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

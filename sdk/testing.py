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
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sdk.decider import Decider, DecisionTask
from sdk.decider_worker import run_decider
from sdk.events import Event

# Re-exported: `check_decisions` lived here before `sdk.replay`.
from sdk.replay import check_decisions as check_decisions

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

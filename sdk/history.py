"""Typed views of a run, folded from its history alone.

A decider must decide from the history in its task and nothing else, so
everything it asks ("did activity `a` succeed?", "has `approved` been
signalled?") is answered here by one pass over the events, the way
simpleflow's history fold does it, but into typed records.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sdk.events import Event

ActivityStatus = Literal[
    "scheduled", "started", "succeeded", "failed", "timed_out", "canceled", "cancel_requested"
]
TimerStatus = Literal["started", "fired", "canceled", "failed"]
LockStatus = Literal["requested", "held", "released", "failed"]
ChildStatus = Literal[
    "started", "succeeded", "failed", "timed_out", "canceled", "terminated", "start_failed"
]
OPEN_ACTIVITY: frozenset[str] = frozenset({"scheduled", "started", "cancel_requested"})


@dataclass(frozen=True)
class Failure:
    """Why an activity (or a decision) did not succeed."""

    reason: str
    details: Any = None
    non_retryable: bool = False

    @property
    def message(self) -> str:
        """The exception message an SDK activity recorded, else the reason."""
        if isinstance(self.details, dict) and isinstance(self.details.get("message"), str):
            return str(self.details["message"])
        return self.reason


@dataclass
class ActivityState:
    """The latest attempt of one activity id, and how many attempts there were."""

    activity_id: str
    activity_type: str = ""
    status: ActivityStatus = "scheduled"
    input: Any = None
    result: Any = None
    failure: Failure | None = None
    attempts: int = 0
    task_list: str = ""
    identity: str = ""  # the worker that started the latest attempt
    scheduled_event_id: int = 0
    started_event_id: int = 0

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_ACTIVITY


@dataclass
class TimerState:
    timer_id: str
    status: TimerStatus = "started"
    delay: float = 0.0  # seconds
    started_event_id: int = 0
    failure: Failure | None = None


@dataclass
class LockState:
    """A lock the run asked for: `requested` (queued), `held`, `released` (by the
    decider, by the run's own withdrawal, or `forced` by an operator) or `failed`
    (the request was refused: `failure.reason` is the cause)."""

    lock_name: str
    status: LockStatus = "requested"
    requested_event_id: int = 0
    acquired_event_id: int = 0
    forced: bool = False
    released_by: str = ""  # the operator's identity of a forced release
    failure: Failure | None = None

    @property
    def held(self) -> bool:
        return self.status == "held"


@dataclass
class ChildState:
    """A child workflow this run started: `started` while it runs, then how it
    ended (`start_failed` when the start was refused: `failure.reason` is the cause)."""

    workflow_id: str
    workflow_type: str = ""
    status: ChildStatus = "started"
    run_id: str = ""  # its first run, then the run that closed
    result: Any = None
    failure: Failure | None = None
    started_event_id: int = 0

    @property
    def is_open(self) -> bool:
        return self.status == "started"


@dataclass(frozen=True)
class Signal:
    name: str
    input: Any
    event_id: int
    timestamp: datetime
    identity: str = ""


@dataclass(frozen=True)
class Marker:
    name: str
    details: Any
    event_id: int


@dataclass
class RunView:
    """Everything the fold knows about the run."""

    input: Any = None
    workflow_type: str = ""
    version: str = ""
    task_list: str = ""
    cancel_requested: bool = False
    activities: dict[str, ActivityState] = field(default_factory=dict)
    timers: dict[str, TimerState] = field(default_factory=dict)
    signals: list[Signal] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    locks: dict[str, LockState] = field(default_factory=dict)
    children: dict[str, ChildState] = field(default_factory=dict)


class Fold:
    """A fold that can be carried on: `add` the events that follow and `view`
    is the run as of the last one (a decider's cache folds only what is new)."""

    def __init__(self) -> None:
        self.view = RunView()
        self._by_scheduled: dict[int, ActivityState] = {}

    def add(self, events: Iterable[Event]) -> Fold:
        view, by_scheduled = self.view, self._by_scheduled
        for event in events:
            handler = _HANDLERS.get(event.type)
            if handler is not None:
                handler(view, by_scheduled, event)
        return self


def fold(events: Iterable[Event]) -> RunView:
    return Fold().add(events).view


# -- one handler per event type ---------------------------------------------------------

_Scheduled = dict[int, ActivityState]


def _workflow_started(view: RunView, _: _Scheduled, e: Event) -> None:
    kind = e.get("workflow_type", {})
    view.input = e.get("input")
    view.workflow_type = kind.get("name", "")
    view.version = kind.get("version", "")
    view.task_list = e.get("task_list", "")
    for carried in e.get("carried_locks") or ():
        # Taken over from the run this one continues: held (or awaited) from event 1.
        name = str(carried.get("lock_name", ""))
        held = bool(carried.get("held", False))
        view.locks[name] = LockState(
            name,
            "held" if held else "requested",
            requested_event_id=e.event_id,
            acquired_event_id=e.event_id if held else 0,
        )


def _cancel_requested(view: RunView, _: _Scheduled, e: Event) -> None:
    view.cancel_requested = True


def _activity_scheduled(view: RunView, by_scheduled: _Scheduled, e: Event) -> None:
    act_id = e.get("activity_id", "")
    act = view.activities.get(act_id) or ActivityState(act_id)
    act.activity_type = e.get("activity_type", {}).get("name", "")
    act.status = "scheduled"
    act.input = e.get("input")
    act.result = act.failure = None
    act.attempts += 1
    act.task_list = e.get("task_list", "")
    act.identity = ""
    act.scheduled_event_id = e.event_id
    act.started_event_id = 0
    view.activities[act_id] = act
    by_scheduled[e.event_id] = act


def _activity_schedule_failed(view: RunView, _: _Scheduled, e: Event) -> None:
    act_id = e.get("activity_id", "")
    act = view.activities.get(act_id) or ActivityState(act_id)
    if act.is_open and act.attempts:
        return  # refused as a duplicate of the open attempt, which carries on
    act.activity_type = e.get("activity_type", {}).get("name", act.activity_type)
    act.status = "failed"
    act.result = None
    act.failure = Failure(e.get("cause", ""))
    view.activities[act_id] = act


def _activity_event(status: ActivityStatus) -> Any:
    def handle(view: RunView, by_scheduled: _Scheduled, e: Event) -> None:
        act = by_scheduled.get(e.get("scheduled_event_id", 0))
        if act is None or act.scheduled_event_id != e.get("scheduled_event_id"):
            return  # an event of an earlier attempt
        act.status = status
        if e.type == "ActivityStarted":
            act.started_event_id = e.event_id
            act.identity = e.get("identity", "")
        elif e.type == "ActivitySuccess":
            act.result = e.get("result")
        elif e.type == "ActivityFailed":
            act.failure = Failure(
                e.get("reason", ""), e.get("details"), bool(e.get("non_retryable", False))
            )
        elif e.type in ("ActivityTimedOut", "ActivityScheduledTimeout"):
            act.failure = Failure(
                e.get("timeout_type", "") or "SCHEDULE_TO_START", e.get("details")
            )
        elif e.type == "ActivityCanceled":
            act.failure = Failure("Canceled", e.get("details"))

    return handle


def _activity_cancel_requested(view: RunView, _: _Scheduled, e: Event) -> None:
    act = view.activities.get(e.get("activity_id", ""))
    if act is not None and act.is_open:
        act.status = "cancel_requested"


def _timer_scheduled(view: RunView, _: _Scheduled, e: Event) -> None:
    timer_id = e.get("timer_id", "")
    view.timers[timer_id] = TimerState(
        timer_id, "started", float(e.get("start_to_fire_timeout", 0.0)), e.event_id
    )


def _timer_schedule_failed(view: RunView, _: _Scheduled, e: Event) -> None:
    timer_id = e.get("timer_id", "")
    timer = view.timers.get(timer_id)
    if timer is not None and timer.status == "started":
        return  # refused as a duplicate of the running timer
    view.timers[timer_id] = TimerState(timer_id, "failed", failure=Failure(e.get("cause", "")))


def _timer_closed(status: TimerStatus) -> Any:
    def handle(view: RunView, _: _Scheduled, e: Event) -> None:
        timer = view.timers.get(e.get("timer_id", ""))
        if timer is not None and timer.started_event_id == e.get("started_event_id"):
            timer.status = status

    return handle


def _signal(view: RunView, _: _Scheduled, e: Event) -> None:
    view.signals.append(
        Signal(
            e.get("signal_name", ""), e.get("input"), e.event_id, e.timestamp, e.get("identity", "")
        )
    )


def _marker(view: RunView, _: _Scheduled, e: Event) -> None:
    view.markers.append(Marker(e.get("marker_name", ""), e.get("details"), e.event_id))


def _lock_requested(view: RunView, _: _Scheduled, e: Event) -> None:
    name = e.get("lock_name", "")
    view.locks[name] = LockState(name, "requested", requested_event_id=e.event_id)


def _lock_acquired(view: RunView, _: _Scheduled, e: Event) -> None:
    lock = view.locks.get(e.get("lock_name", ""))
    if lock is not None:
        lock.status, lock.acquired_event_id = "held", e.event_id


def _lock_released(view: RunView, _: _Scheduled, e: Event) -> None:
    lock = view.locks.get(e.get("lock_name", ""))
    if lock is not None:
        lock.status = "released"
        lock.forced = bool(e.get("forced", False))
        lock.released_by = e.get("identity", "")


def _request_lock_failed(view: RunView, _: _Scheduled, e: Event) -> None:
    name = e.get("lock_name", "")
    lock = view.locks.get(name)
    if lock is not None and lock.status in ("requested", "held"):
        return  # refused as a duplicate of the request that stands
    view.locks[name] = LockState(name, "failed", failure=Failure(e.get("cause", "")))


def _child_started(view: RunView, _: _Scheduled, e: Event) -> None:
    wid = e.get("workflow_id", "")
    view.children[wid] = ChildState(
        wid,
        e.get("workflow_type", {}).get("name", ""),
        "started",
        run_id=e.get("run_id", ""),
        started_event_id=e.event_id,
    )


def _child_start_failed(view: RunView, _: _Scheduled, e: Event) -> None:
    wid = e.get("workflow_id", "")
    child = view.children.get(wid)
    if child is not None and child.is_open:
        return  # refused as a duplicate of the child that runs
    view.children[wid] = ChildState(
        wid,
        e.get("workflow_type", {}).get("name", ""),
        "start_failed",
        failure=Failure(e.get("cause", "")),
    )


def _child_closed(status: ChildStatus) -> Any:
    def handle(view: RunView, _: _Scheduled, e: Event) -> None:
        child = view.children.get(e.get("workflow_id", ""))
        if child is None:
            return
        child.status, child.run_id = status, e.get("run_id", child.run_id)
        if status == "succeeded":
            child.result = e.get("result")
        elif status == "failed":
            child.failure = Failure(e.get("reason", ""), e.get("details"))
        elif status == "timed_out":
            child.failure = Failure("TimedOut")
        elif status == "canceled":
            child.failure = Failure("Canceled", e.get("details"))
        elif status == "terminated":
            child.failure = Failure("Terminated", e.get("reason"))

    return handle


_HANDLERS: dict[str, Any] = {
    "WorkflowStarted": _workflow_started,
    "WorkflowCancelRequested": _cancel_requested,
    "ActivityScheduled": _activity_scheduled,
    "ActivityScheduleFailed": _activity_schedule_failed,
    "ActivityStarted": _activity_event("started"),
    "ActivitySuccess": _activity_event("succeeded"),
    "ActivityFailed": _activity_event("failed"),
    "ActivityTimedOut": _activity_event("timed_out"),
    "ActivityScheduledTimeout": _activity_event("timed_out"),
    "ActivityCanceled": _activity_event("canceled"),
    "ActivityCancelRequested": _activity_cancel_requested,
    "TimerScheduled": _timer_scheduled,
    "TimerScheduleFailed": _timer_schedule_failed,
    "TimerExpired": _timer_closed("fired"),
    "TimerCanceled": _timer_closed("canceled"),
    "Signal": _signal,
    "Marker": _marker,
    "LockRequested": _lock_requested,
    "LockAcquired": _lock_acquired,
    "LockReleased": _lock_released,
    "RequestLockFailed": _request_lock_failed,
    "ChildWorkflowStarted": _child_started,
    "StartChildWorkflowFailed": _child_start_failed,
    "ChildWorkflowSuccess": _child_closed("succeeded"),
    "ChildWorkflowFailed": _child_closed("failed"),
    "ChildWorkflowTimedOut": _child_closed("timed_out"),
    "ChildWorkflowCanceled": _child_closed("canceled"),
    "ChildWorkflowTerminated": _child_closed("terminated"),
}

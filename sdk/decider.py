"""`Decider` and `DecisionTask`: workflow logic as a function of the history.

    class Order(Decider):
        workflow_type = "order"
        task_list = "orders"

        def decide(self, task: DecisionTask) -> None:
            if "a" not in task.activities:
                task.schedule_activity("a", "resize", input=task.input)
            elif task.activities["a"].status == "succeeded":
                task.complete(task.activities["a"].result)

`decide` reads the task (the whole history up to this decision, and views
folded from it) and records decisions with the builders; the worker sends them
in one answer. It must not read clocks, files or services: the same history
must always give the same decisions, which is what golden-history tests check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any, ClassVar, Literal

from sdk.activity import ActivityDefinition
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.converter import DEFAULT_CONVERTER, PayloadConverter
from sdk.durations import duration
from sdk.errors import WeftError
from sdk.events import Event
from sdk.history import (
    ActivityState,
    ChildState,
    LockState,
    Marker,
    RunView,
    Signal,
    TimerState,
    fold,
)

_POLICIES = {
    "terminate": d.PARENT_CLOSE_POLICY_TERMINATE,
    "request_cancel": d.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
    "abandon": d.PARENT_CLOSE_POLICY_ABANDON,
}
CLOSE_DECISIONS = frozenset({"CompleteWorkflow", "FailWorkflow", "CancelWorkflow", "ContinueAsNew"})
_CARRIABLE = ("held", "requested")
"""Lock states a continue-as-new can hand on (`carry_locks=True`)."""


class Decider:
    """Subclass it, name the workflow type, and write `decide`.

    `task_list` is where the type's decision tasks wait when the process is not
    told otherwise (`weft decider --task-list`). `decide` may be `async`. A sync
    `decide` runs in the worker's thread pool, so a slow one cannot stall the
    worker's polls; one that is quick and never blocks may set `blocking = False`
    to run on the worker's loop and save the hop to a thread.
    """

    workflow_type: ClassVar[str] = ""
    workflow_version: ClassVar[str] = ""
    task_list: ClassVar[str] = ""
    blocking: ClassVar[bool] = True

    @classmethod
    def type_name(cls) -> str:
        return cls.workflow_type or cls.__name__

    def decide(self, task: DecisionTask) -> Awaitable[None] | None:
        raise NotImplementedError(f"{type(self).__name__}.decide")


@dataclass(frozen=True)
class Decision:
    """One decision: its CONTRACT name and its attributes as Python values."""

    kind: str
    attributes: dict[str, Any] = field(default_factory=dict)

    def to_proto(self, converter: PayloadConverter = DEFAULT_CONVERTER) -> d.Decision:
        a = self.attributes
        msg = d.Decision()
        if self.kind == "ScheduleActivity":
            msg.schedule_activity.CopyFrom(
                d.ScheduleActivityDecision(
                    activity_id=a["activity_id"],
                    activity_type=c.ActivityType(name=a["activity_type"], version=a["version"]),
                    input=converter.encode(a["input"]),
                    task_list=a["task_list"],
                    schedule_to_start_timeout=duration(a["schedule_to_start"]),
                    start_to_close_timeout=duration(a["start_to_close"]),
                    schedule_to_close_timeout=duration(a["schedule_to_close"]),
                    heartbeat_timeout=duration(a["heartbeat"]),
                )
            )
        elif self.kind == "RequestCancelActivity":
            msg.request_cancel_activity.activity_id = a["activity_id"]
        elif self.kind == "StartTimer":
            msg.start_timer.CopyFrom(
                d.StartTimerDecision(
                    timer_id=a["timer_id"], start_to_fire_timeout=duration(a["delay"])
                )
            )
        elif self.kind == "CancelTimer":
            msg.cancel_timer.timer_id = a["timer_id"]
        elif self.kind == "RecordMarker":
            msg.record_marker.CopyFrom(
                d.RecordMarkerDecision(
                    marker_name=a["marker_name"], details=converter.encode(a["details"])
                )
            )
        elif self.kind == "RequestLock":
            msg.request_lock.lock_name = a["lock_name"]
        elif self.kind == "ReleaseLock":
            msg.release_lock.lock_name = a["lock_name"]
        elif self.kind == "StartChildWorkflow":
            msg.start_child_workflow.CopyFrom(
                d.StartChildWorkflowDecision(
                    workflow_id=a["workflow_id"],
                    workflow_type=c.WorkflowType(name=a["workflow_type"], version=a["version"]),
                    task_list=a["task_list"],
                    input=converter.encode(a["input"]),
                    execution_timeout=duration(a["execution_timeout"]),
                    decider_timeout=duration(a["decider_timeout"]),
                    parent_close_policy=_POLICIES[a["parent_close_policy"]],
                )
            )
        elif self.kind == "SignalExternalWorkflow":
            msg.signal_external_workflow.CopyFrom(
                d.SignalExternalWorkflowDecision(
                    execution=c.WorkflowExecution(workflow_id=a["workflow_id"], run_id=a["run_id"]),
                    signal_name=a["signal_name"],
                    input=converter.encode(a["input"]),
                )
            )
        elif self.kind == "CompleteWorkflow":
            msg.complete_workflow.result.CopyFrom(converter.encode(a["result"]))
        elif self.kind == "FailWorkflow":
            msg.fail_workflow.CopyFrom(
                d.FailWorkflowDecision(reason=a["reason"], details=converter.encode(a["details"]))
            )
        elif self.kind == "CancelWorkflow":
            msg.cancel_workflow.details.CopyFrom(converter.encode(a["details"]))
        elif self.kind == "ContinueAsNew":
            msg.continue_as_new.CopyFrom(
                d.ContinueAsNewDecision(
                    input=converter.encode(a["input"]),
                    workflow_type=c.WorkflowType(name=a["workflow_type"], version=a["version"]),
                    task_list=a["task_list"],
                    execution_timeout=duration(a["execution_timeout"]),
                    decider_timeout=duration(a["decider_timeout"]),
                    carried_locks=a.get("carried_locks") or (),
                )
            )
        else:
            raise WeftError(f"unknown decision {self.kind!r}")
        return msg


class DecisionTask:
    """One decision task: the history up to its `DeciderStarted`, views folded from
    it, and the decisions `decide` makes."""

    def __init__(
        self,
        *,
        workflow_id: str,
        run_id: str,
        workflow_type: str,
        history: list[Event],
        started_event_id: int,
        previous_started_event_id: int = 0,
        version: str = "",
        continue_as_new_suggested: bool = False,
        attempt: int = 1,
        view: RunView | None = None,
    ) -> None:
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.workflow_type = workflow_type
        self.version = version
        self.history = history
        self.started_event_id = started_event_id
        self.previous_started_event_id = previous_started_event_id
        self.continue_as_new_suggested = continue_as_new_suggested
        self.attempt = attempt
        """1, or more when this task failed or timed out before (the same history
        decided again: a decider that raised keeps raising unless something changed)."""
        self.decisions: list[Decision] = []
        if view is not None:
            self.__dict__["view"] = view  # folded already (a decider's cache)

    # -- reading ------------------------------------------------------------------------

    @cached_property
    def view(self) -> RunView:
        return fold(self.history)

    @property
    def input(self) -> Any:
        """The workflow's input, from `WorkflowStarted`."""
        return self.view.input

    @property
    def new_events(self) -> list[Event]:
        """The events since the previous decision task started: what is new to decide on."""
        start = len(self.history)
        while start and self.history[start - 1].event_id > self.previous_started_event_id:
            start -= 1
        return self.history[start:]

    @property
    def activities(self) -> dict[str, ActivityState]:
        return self.view.activities

    @property
    def timers(self) -> dict[str, TimerState]:
        return self.view.timers

    @property
    def children(self) -> dict[str, ChildState]:
        """Child workflows this run started, by workflow id."""
        return self.view.children

    @property
    def locks(self) -> dict[str, LockState]:
        """Locks this run asked for, by name: requested, held, released or failed."""
        return self.view.locks

    @property
    def cancel_requested(self) -> bool:
        """Whether someone asked to cancel the workflow (`WorkflowCancelRequested`)."""
        return self.view.cancel_requested

    @property
    def is_first(self) -> bool:
        """True for the run's first decision task."""
        return self.previous_started_event_id == 0

    def signals(self, name: str | None = None) -> list[Signal]:
        """Signals received so far, oldest first; only those called `name` if given."""
        return [s for s in self.view.signals if name is None or s.name == name]

    def markers(self, name: str | None = None) -> list[Marker]:
        """Markers recorded so far, oldest first; only those called `name` if given."""
        return [m for m in self.view.markers if name is None or m.name == name]

    @property
    def open_activities(self) -> list[ActivityState]:
        return [a for a in self.activities.values() if a.is_open]

    # -- deciding -----------------------------------------------------------------------

    def schedule_activity(
        self,
        activity_id: str,
        activity_type: str | ActivityDefinition,
        input: Any = None,
        *,
        version: str | None = None,
        task_list: str | None = None,
        schedule_to_start: timedelta | None = None,
        start_to_close: timedelta | None = None,
        schedule_to_close: timedelta | None = None,
        heartbeat: timedelta | None = None,
    ) -> None:
        """Schedule an activity. Given the `@activity` function itself, its name,
        task list and timeouts are the defaults; otherwise the server's defaults
        (the activity type's registration, then the workflow's task list) apply."""
        spec = activity_type if isinstance(activity_type, ActivityDefinition) else None
        self._add(
            "ScheduleActivity",
            activity_id=activity_id,
            activity_type=spec.name if spec else str(activity_type),
            version=version if version is not None else (spec.version if spec else ""),
            input=input,
            task_list=task_list or (spec.task_list if spec else ""),
            schedule_to_start=schedule_to_start or (spec.schedule_to_start if spec else None),
            start_to_close=start_to_close or (spec.start_to_close if spec else None),
            schedule_to_close=schedule_to_close or (spec.schedule_to_close if spec else None),
            heartbeat=heartbeat or (spec.heartbeat if spec else None),
        )

    def cancel_activity(self, activity_id: str) -> None:
        self._add("RequestCancelActivity", activity_id=activity_id)

    def start_timer(self, timer_id: str, delay: timedelta) -> None:
        self._add("StartTimer", timer_id=timer_id, delay=delay)

    def cancel_timer(self, timer_id: str) -> None:
        self._add("CancelTimer", timer_id=timer_id)

    def record_marker(self, name: str, details: Any = None) -> None:
        self._add("RecordMarker", marker_name=name, details=details)

    def request_lock(self, name: str) -> None:
        """Ask for a lock of the namespace. `LockAcquired` (a new decision task)
        says when the run holds it; until then it waits in the queue, which is
        served in request order. The run's close releases it."""
        self._add("RequestLock", lock_name=name)

    def release_lock(self, name: str) -> None:
        """Give back a held lock, or withdraw a request still waiting."""
        self._add("ReleaseLock", lock_name=name)

    def start_child_workflow(
        self,
        workflow_id: str,
        workflow_type: str,
        input: Any = None,
        *,
        version: str = "",
        task_list: str = "",
        execution_timeout: timedelta | None = None,
        decider_timeout: timedelta | None = None,
        parent_close_policy: Literal["terminate", "request_cancel", "abandon"] = "terminate",
    ) -> None:
        """Start a child workflow: `ChildWorkflowStarted` now, and one of
        `ChildWorkflowSuccess/Failed/TimedOut/Canceled/Terminated` (a new decision
        task) when it ends. When this run closes first, the policy says what
        happens to the child."""
        self._add(
            "StartChildWorkflow",
            workflow_id=workflow_id,
            workflow_type=workflow_type,
            version=version,
            input=input,
            task_list=task_list,
            execution_timeout=execution_timeout,
            decider_timeout=decider_timeout,
            parent_close_policy=parent_close_policy,
        )

    def signal_external_workflow(
        self, workflow_id: str, name: str, input: Any = None, *, run_id: str = ""
    ) -> None:
        """Send a signal to another workflow's open run (`ExternalWorkflowSignaled`,
        or `SignalExternalWorkflowFailed` when there is none)."""
        self._add(
            "SignalExternalWorkflow",
            workflow_id=workflow_id,
            run_id=run_id,
            signal_name=name,
            input=input,
        )

    def complete(self, result: Any = None) -> None:
        self._add("CompleteWorkflow", result=result)

    def fail(self, reason: str, details: Any = None) -> None:
        self._add("FailWorkflow", reason=reason, details=details)

    def cancel(self, details: Any = None) -> None:
        """Close the workflow as canceled (the answer to a cancel request)."""
        self._add("CancelWorkflow", details=details)

    def continue_as_new(
        self,
        input: Any = None,
        *,
        workflow_type: str = "",
        version: str = "",
        task_list: str = "",
        execution_timeout: timedelta | None = None,
        decider_timeout: timedelta | None = None,
        carry_locks: bool | Sequence[str] = False,
    ) -> None:
        """Close this run and start a fresh one of the same workflow id (an empty
        history); unset options carry over from this run, and so does its retention.

        `carry_locks`: the locks the new run takes over as they stand — `True` for
        every lock this run holds or awaits, or their names. A held lock stays
        held across the two runs (no `LockReleased`, no other run gets it in
        between); an awaited one keeps its place in the queue. Locks not carried
        are released by the close, as with any close."""
        if carry_locks is True:
            carried = [n for n, lock in self.locks.items() if lock.status in _CARRIABLE]
        elif carry_locks is False:
            carried = []
        else:
            carried = list(carry_locks)
        self._add(
            "ContinueAsNew",
            input=input,
            workflow_type=workflow_type,
            version=version,
            task_list=task_list,
            execution_timeout=execution_timeout,
            decider_timeout=decider_timeout,
            # Only when some are: a decision without them reads as it always did.
            **({"carried_locks": carried} if carried else {}),
        )

    @property
    def closed(self) -> bool:
        """Whether a close decision was made (nothing may follow it)."""
        return bool(self.decisions) and self.decisions[-1].kind in CLOSE_DECISIONS

    def _add(self, kind: str, **attributes: Any) -> None:
        if self.closed:
            raise WeftError(
                f"{kind} after {self.decisions[-1].kind}: a close decision must be the last"
            )
        self.decisions.append(Decision(kind, attributes))

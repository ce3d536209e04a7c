"""The run as the step interpreter sees it while replaying: the operations that
wait on the history (activities, timers, signals) and the decisions they make.

Each operation is a `Future` keyed by a deterministic id (the step's key), so
when the history is replayed the same step finds the same event. Cancelling an
operation's future records its cancel decision (`RequestCancelActivity`,
`CancelTimer`): a step timeout that wins its race cancels the slow activity.
"""

from __future__ import annotations

from collections import defaultdict, deque
from datetime import datetime, timedelta
from typing import Any

import structlog

from sdk.decider import Decision
from sdk.events import ACTIVITY_CLOSE_TYPES, CHILD_CLOSE_TYPES, Event
from workers.steps.errors import StepError
from workers.steps.runtime import Future

log = structlog.get_logger("weft.steps")


class RunOperations:
    """Futures for the run's activities, timers and signals, fed by events."""

    def __init__(
        self, workflow_id: str, run_id: str, min_timer: timedelta = timedelta(milliseconds=1)
    ) -> None:
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.min_timer = max(min_timer, timedelta(milliseconds=1))
        """Shorter timers are rounded up to this (`limits.MIN_TIMER` in a decider)."""
        self.now = datetime.min
        self.replaying = True
        self.commands: list[Decision] = []
        self._activities: dict[str, Future] = {}
        self._by_scheduled: dict[int, str] = {}
        self._timers: dict[str, Future] = {}
        self._signals: dict[str, deque[Any]] = defaultdict(deque)
        self._waiters: dict[str, deque[Future]] = defaultdict(deque)
        self._lock_requests: dict[str, Future] = {}
        """The run's request to the service for each lock, by the block that made it."""
        self._lock_queue: dict[str, deque[Future]] = defaultdict(deque)
        """Blocks of this run waiting for a lock another of its blocks has (the
        service knows one holder per run: the run hands the lock on inside)."""
        self._adoptable: set[str] = set()
        self.held: set[str] = set()
        """Locks the run holds, from its LockAcquired / LockReleased events."""
        self._children: dict[str, Future] = {}
        self._sends: dict[tuple[str, str], deque[Future]] = defaultdict(deque)
        self._open_activities: set[str] = set()
        """Scheduled and not yet ended by the service (a cancelled one stays until
        its ActivityCanceled)."""

    # -- decisions ----------------------------------------------------------------------

    def command(self, kind: str, **attributes: Any) -> None:
        self.commands.append(Decision(kind, attributes))

    def take_commands(self) -> list[Decision]:
        commands, self.commands = self.commands, []
        return commands

    # -- operations ---------------------------------------------------------------------

    def activity(
        self,
        activity_id: str,
        activity_type: str,
        input: Any,
        *,
        version: str = "",
        task_list: str = "",
        timeouts: dict[str, timedelta | None] | None = None,
    ) -> Future:
        spans = timeouts or {}
        future = Future(
            on_cancel=lambda: self.command("RequestCancelActivity", activity_id=activity_id)
        )
        self._activities[activity_id] = future
        self._open_activities.add(activity_id)
        self.command(
            "ScheduleActivity",
            activity_id=activity_id,
            activity_type=activity_type,
            version=version,
            input=input,
            task_list=task_list,
            schedule_to_start=spans.get("schedule_to_start"),
            start_to_close=spans.get("start_to_close"),
            schedule_to_close=spans.get("schedule_to_close"),
            heartbeat=spans.get("heartbeat"),
        )
        return future

    def timer(self, timer_id: str, delay: timedelta) -> Future:
        future = Future(on_cancel=lambda: self.command("CancelTimer", timer_id=timer_id))
        self._timers[timer_id] = future
        self.command("StartTimer", timer_id=timer_id, delay=max(delay, self.min_timer))
        return future

    def signal(self, name: str) -> Future:
        """The oldest signal of this name not yet taken by another wait; signals
        that arrive before anyone waits are kept for the next wait."""
        queue = self._signals[name]
        if queue:
            taken = Future()
            taken.set_result(queue.popleft())
            return taken
        waiters = self._waiters[name]
        future = Future(on_cancel=lambda: _discard(waiters, future))
        waiters.append(future)
        return future

    def lock(self, name: str) -> Future:
        """A block's lock: resolved once the block may go on. The first block of the
        run to want it asks the service (resolved on `LockAcquired`); others wait
        their turn inside the run. A waiting block that is abandoned gives up its
        place (the request passes to the next block, or is withdrawn)."""
        if name in self._adoptable:
            # Held by a path a replay abandoned: the new path takes it over.
            self._adoptable.discard(name)
            taken = Future()
            taken.set_result(None)
            return taken
        if name in self._lock_requests:
            queue = self._lock_queue[name]
            behind = Future(on_cancel=lambda: _discard(queue, behind))
            queue.append(behind)
            return behind
        future = Future(on_cancel=lambda: self._withdraw(name))
        self._lock_requests[name] = future
        self.command("RequestLock", lock_name=name)
        return future

    def release_lock(self, name: str) -> None:
        """The block is done with the lock: the next block of the run gets it, or
        the service is told."""
        queue = self._lock_queue.get(name)
        if queue:
            queue.popleft().set_result(None)
            return
        self._lock_requests.pop(name, None)
        self.held.discard(name)
        self.command("ReleaseLock", lock_name=name)

    def _withdraw(self, name: str) -> None:
        queue = self._lock_queue.get(name)
        if queue:
            heir = queue.popleft()
            heir.on_cancel(lambda: self._withdraw(name))
            self._lock_requests[name] = heir
            return
        self._lock_requests.pop(name, None)
        self.command("ReleaseLock", lock_name=name)

    def abandon_locks(self, keep: str = "") -> None:
        """A replay abandons the current path: the locks its blocks hold stay held
        (STEPS.md: a replay keeps the lock with its holder), for the new path's
        blocks to take over; `keep` is the workflow's own lock."""
        self._adoptable = self.held - {keep}

    def child(
        self,
        workflow_id: str,
        workflow_type: str,
        input: Any,
        *,
        version: str = "",
        task_list: str = "",
        parent_close_policy: str = "terminate",
    ) -> Future:
        """Start a child workflow; resolved with its result when it succeeds."""
        future = Future()  # a child is not stopped by abandoning the step: its policy applies
        self._children[workflow_id] = future
        self.command(
            "StartChildWorkflow",
            workflow_id=workflow_id,
            workflow_type=workflow_type,
            version=version,
            input=input,
            task_list=task_list,
            execution_timeout=None,
            decider_timeout=None,
            parent_close_policy=parent_close_policy,
        )
        return future

    def signal_workflow(self, workflow_id: str, name: str, input: Any) -> Future:
        """Signal another workflow; resolved once the service appended it there."""
        future = Future()
        self._sends[(workflow_id, name)].append(future)
        self.command(
            "SignalExternalWorkflow",
            workflow_id=workflow_id,
            run_id="",
            signal_name=name,
            input=input,
        )
        return future

    def marker(self, name: str, details: Any) -> None:
        self.command("RecordMarker", marker_name=name, details=details)

    # -- continue-as-new (`continuation.py`) ----------------------------------------------

    def outstanding(self, except_timers: set[str]) -> bool:
        """Whether anything the run asked for is still under way: an activity, a
        timer (but those named), a child, a lock request, a signal being sent or
        waited for."""
        return bool(
            self._open_activities
            or any(not f.done for t, f in self._timers.items() if t not in except_timers)
            or any(not f.done for f in self._children.values())
            or any(name not in self.held for name in self._lock_requests)
            or any(self._lock_queue.values())
            or any(f for q in self._sends.values() for f in q if not f.done)
            or any(self._waiters.values())
        )

    def unclaimed_signals(self) -> dict[str, list[Any]]:
        """Signals received that no wait took yet, by name, oldest first."""
        return {name: list(queue) for name, queue in self._signals.items() if queue}

    def take_over(self, signals: dict[str, list[Any]], held: list[str]) -> None:
        """A continued run starts with what the run it continues had: its unclaimed
        signals (ahead of any that arrive now) and its held locks."""
        for name, inputs in signals.items():
            self._signals[name].extend(inputs)
        self.held.update(held)

    # -- events -------------------------------------------------------------------------

    def deliver(self, event: Event) -> None:
        """Resolve whatever `event` completes."""
        kind = event.type
        if kind == "ActivityScheduled":
            self._by_scheduled[event.event_id] = str(event.get("activity_id", ""))
        elif kind == "ActivityScheduleFailed":
            self._open_activities.discard(str(event.get("activity_id", "")))
            self._fail_activity(
                str(event.get("activity_id", "")),
                StepError(
                    "ActivityScheduleFailed",
                    f"activity could not be scheduled: {event.get('cause', '')}",
                    {"cause": event.get("cause", "")},
                ),
            )
        elif kind in _ACTIVITY_OUTCOMES:
            activity_id = self._by_scheduled.get(int(event.get("scheduled_event_id", 0)), "")
            self._open_activities.discard(activity_id)
            future = self._activities.get(activity_id)
            if future is None:
                return
            if kind == "ActivitySuccess":
                future.set_result(event.get("result"))
            else:
                future.set_error(_activity_error(activity_id, event))
        elif kind == "TimerExpired":
            timer = self._timers.get(str(event.get("timer_id", "")))
            if timer is not None:
                timer.set_result(None)
        elif kind == "TimerScheduleFailed":
            timer = self._timers.get(str(event.get("timer_id", "")))
            if timer is not None:
                cause = event.get("cause", "")
                timer.set_error(StepError("TimerFailed", f"timer refused: {cause}"))
        elif kind == "LockAcquired":
            name = str(event.get("lock_name", ""))
            self.held.add(name)
            waiting = self._lock_requests.get(name)
            if waiting is not None:
                waiting.set_result(None)
        elif kind == "LockReleased":
            self.held.discard(str(event.get("lock_name", "")))
        elif kind == "RequestLockFailed":
            name = str(event.get("lock_name", ""))
            cause = event.get("cause", "")
            error = StepError("LockFailed", f"lock {name!r} refused: {cause}")
            refused = self._lock_requests.pop(name, None)
            for waiting in (refused, *self._lock_queue.pop(name, ())):
                if waiting is not None:
                    waiting.set_error(error)
        elif kind in _CHILD_OUTCOMES:
            self._child_outcome(event)
        elif kind in ("ExternalWorkflowSignaled", "SignalExternalWorkflowFailed"):
            key = (str(event.get("workflow_id", "")), str(event.get("signal_name", "")))
            sends = self._sends[key]
            if sends:
                sent = sends.popleft()
                if kind == "ExternalWorkflowSignaled":
                    sent.set_result(None)
                else:
                    sent.set_error(
                        StepError(
                            "SignalFailed",
                            f"no open run of workflow {key[0]!r} to signal",
                            {"cause": event.get("cause", "")},
                        )
                    )
        elif kind == "Signal":
            name = str(event.get("signal_name", ""))
            waiters = self._waiters[name]
            if waiters:
                waiters.popleft().set_result(event.get("input"))
            else:
                self._signals[name].append(event.get("input"))

    def _child_outcome(self, event: Event) -> None:
        workflow_id = str(event.get("workflow_id", ""))
        future = self._children.get(workflow_id)
        if future is None:
            return
        kind = event.type
        if kind == "ChildWorkflowSuccess":
            future.set_result(event.get("result"))
        elif kind == "StartChildWorkflowFailed":
            cause = event.get("cause", "")
            future.set_error(
                StepError(
                    "ChildStartFailed",
                    f"child {workflow_id} could not start: {cause}",
                    {"cause": cause},
                )
            )
        else:
            how = kind.removeprefix("ChildWorkflow")  # Failed, TimedOut, Canceled, Terminated
            details = {"reason": event.get("reason"), "details": event.get("details")}
            reason = f": {event.get('reason')}" if event.get("reason") else ""
            future.set_error(
                StepError(f"Child{how}", f"child {workflow_id} {how.lower()}{reason}", details)
            )

    def _fail_activity(self, activity_id: str, error: StepError) -> None:
        future = self._activities.get(activity_id)
        if future is not None:
            future.set_error(error)


_ACTIVITY_OUTCOMES = ACTIVITY_CLOSE_TYPES
# A child that never started ends its step as surely as one that closed.
_CHILD_OUTCOMES = CHILD_CLOSE_TYPES | {"StartChildWorkflowFailed"}


def _activity_error(activity_id: str, event: Event) -> StepError:
    details = event.get("details")
    if event.type == "ActivityFailed":
        reason = str(event.get("reason", "")) or "ActivityFailed"
        message = details.get("message") if isinstance(details, dict) else None
        text = f"{reason}: {message}" if message else reason
        return StepError("ActivityFailed", text, {"reason": reason, "details": details})
    if event.type == "ActivityTimedOut":
        kind = str(event.get("timeout_type", "")) or "START_TO_CLOSE"
        return StepError(
            "ActivityTimedOut",
            f"activity {activity_id} timed out ({kind})",
            {"timeout_type": kind, "details": details},
        )
    if event.type == "ActivityScheduledTimeout":
        return StepError(
            "ActivityTimedOut",
            f"no runner took activity {activity_id} in time (SCHEDULE_TO_START)",
            {"timeout_type": "SCHEDULE_TO_START"},
        )
    return StepError("ActivityCanceled", f"activity {activity_id} was canceled", details)


def _discard(queue: deque[Future], future: Future) -> None:
    if future in queue:
        queue.remove(future)

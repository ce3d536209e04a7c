"""What the client returns about workflows: plain frozen dataclasses built from
the server's messages, so callers never touch generated code."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.converter import PayloadConverter
from sdk.diagnostics import Finding
from sdk.events import rfc3339

STATUS_FILTERS = {
    None: s.STATUS_FILTER_UNSPECIFIED,
    "open": s.STATUS_FILTER_OPEN,
    "closed": s.STATUS_FILTER_CLOSED,
}
"""`AsyncClient.list`'s `status`, as ListWorkflows filters by it."""


@dataclass(frozen=True)
class WorkflowRun:
    """A started run. `started` is False when signal-with-start found it already open."""

    workflow_id: str
    run_id: str
    started: bool = True


@dataclass(frozen=True)
class WorkflowInfo:
    workflow_id: str
    run_id: str
    workflow_type: str
    version: str
    task_list: str
    status: str  # open, completed, failed, canceled, terminated, continued_as_new, timed_out
    start_time: datetime | None
    close_time: datetime | None
    history_length: int
    continued_from_run_id: str = ""
    parent_run_id: str = ""
    replay_of_run_id: str = ""
    replayed_by_run_id: str = ""

    @classmethod
    def from_proto(cls, msg: c.WorkflowExecutionInfo) -> WorkflowInfo:
        return cls(
            workflow_id=msg.execution.workflow_id,
            run_id=msg.execution.run_id,
            workflow_type=msg.workflow_type.name,
            version=msg.workflow_type.version,
            task_list=msg.task_list,
            status=status_name(msg.status),
            start_time=_time(msg, "start_time"),
            close_time=_time(msg, "close_time"),
            history_length=msg.history_length,
            continued_from_run_id=msg.continued_from_run_id,
            parent_run_id=msg.parent_run_id,
            replay_of_run_id=msg.replay_of_run_id,
            replayed_by_run_id=msg.replayed_by_run_id,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "workflow_type": self.workflow_type,
            "version": self.version,
            "task_list": self.task_list,
            "status": self.status,
            "start_time": rfc3339(self.start_time) if self.start_time else None,
            "close_time": rfc3339(self.close_time) if self.close_time else None,
            "history_length": self.history_length,
            "continued_from_run_id": self.continued_from_run_id or None,
            "parent_run_id": self.parent_run_id or None,
            "replay_of_run_id": self.replay_of_run_id or None,
            "replayed_by_run_id": self.replayed_by_run_id or None,
        }


@dataclass(frozen=True)
class PendingActivity:
    activity_id: str
    activity_type: str
    state: str
    task_list: str
    scheduled_event_id: int
    started_event_id: int
    identity: str
    heartbeat_details: Any
    last_heartbeat_time: datetime | None
    principal: str = ""
    """The worker as the server authenticated it (empty without authentication)."""

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        stamp = self.last_heartbeat_time
        out["last_heartbeat_time"] = rfc3339(stamp) if stamp else None
        return out


@dataclass(frozen=True)
class PendingTimer:
    timer_id: str
    started_event_id: int
    fire_time: datetime | None

    def to_json(self) -> dict[str, Any]:
        fire = self.fire_time
        return {
            "timer_id": self.timer_id,
            "started_event_id": self.started_event_id,
            "fire_time": rfc3339(fire) if fire else None,
        }


@dataclass(frozen=True)
class RunLock:
    """A lock a run holds or waits for (`state`: "held" or "waiting")."""

    lock_name: str
    state: str
    requested_event_id: int
    acquired_event_id: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LockHolder:
    """A run at a lock: its holder, or a waiter, since it got or asked for it."""

    workflow_id: str
    run_id: str
    requested_event_id: int
    since: datetime | None

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "since": rfc3339(self.since) if self.since else None}


@dataclass(frozen=True)
class LockInfo:
    """A lock of the namespace: its holder and its waiters in request order."""

    lock_name: str
    holder: LockHolder | None
    waiters: list[LockHolder] = field(default_factory=list)

    @classmethod
    def from_proto(cls, msg: a.LockInfo) -> LockInfo:
        def one(h: a.LockHolder) -> LockHolder:
            return LockHolder(h.workflow_id, h.run_id, h.requested_event_id, _time(h, "since"))

        return cls(
            lock_name=msg.lock_name,
            holder=one(msg.holder) if msg.HasField("holder") else None,
            waiters=[one(w) for w in msg.waiters],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "lock_name": self.lock_name,
            "holder": self.holder.to_json() if self.holder else None,
            "waiters": [w.to_json() for w in self.waiters],
        }


@dataclass(frozen=True)
class NamespaceInfo:
    """A namespace and its defaults (`registered` False: used, never registered)."""

    name: str
    retention: str
    description: str
    registered: bool

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ForcedRelease:
    """What an operator's force-release did: whom it took the lock from, and to
    whom it went ("" when nobody waited)."""

    lock_name: str
    released_workflow_id: str
    released_run_id: str
    granted_workflow_id: str
    granted_run_id: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class WorkflowDescription:
    """A run as it stands: its status, its decider, what it waits for."""

    info: WorkflowInfo
    decider_state: str
    execution_timeout: timedelta
    decider_timeout: timedelta
    cancel_requested: bool
    pending_activities: list[PendingActivity] = field(default_factory=list)
    pending_timers: list[PendingTimer] = field(default_factory=list)
    locks: list[RunLock] = field(default_factory=list)
    decider_attempt: int = 0
    """The decision task's attempt: above 1 after failures or timeouts in a row."""
    decider_failure: str = ""
    """Why the last attempt failed: its cause, and the decider's message if any."""
    decider_retry_time: datetime | None = None
    """When a failed decision task is handed out again (while it backs off)."""
    started_by: str = ""
    """The principal that started the run (empty without authentication)."""
    problems: list[Finding] = field(default_factory=list)
    """What keeps the run from moving (the `weft doctor` findings naming it)."""

    @property
    def status(self) -> str:
        return self.info.status

    @classmethod
    def from_proto(
        cls, msg: s.DescribeWorkflowResponse, converter: PayloadConverter
    ) -> WorkflowDescription:
        return cls(
            info=WorkflowInfo.from_proto(msg.info),
            decider_state=msg.decider_state,
            execution_timeout=msg.execution_timeout.ToTimedelta(),
            decider_timeout=msg.decider_timeout.ToTimedelta(),
            cancel_requested=msg.cancel_requested,
            pending_activities=[
                PendingActivity(
                    activity_id=a.activity_id,
                    activity_type=a.activity_type.name,
                    state=a.state,
                    task_list=a.task_list,
                    scheduled_event_id=a.scheduled_event_id,
                    started_event_id=a.started_event_id,
                    identity=a.identity,
                    heartbeat_details=converter.decode_lenient(a.heartbeat_details)
                    if a.HasField("heartbeat_details")
                    else None,
                    last_heartbeat_time=_time(a, "last_heartbeat_time"),
                    principal=a.principal,
                )
                for a in msg.pending_activities
            ],
            pending_timers=[
                PendingTimer(t.timer_id, t.started_event_id, _time(t, "fire_time"))
                for t in msg.pending_timers
            ],
            locks=[
                RunLock(lk.lock_name, lk.state, lk.requested_event_id, lk.acquired_event_id)
                for lk in msg.locks
            ],
            decider_attempt=msg.decider_attempt,
            decider_failure=": ".join(
                part for part in (msg.decider_failure_cause, msg.decider_failure_message) if part
            ),
            decider_retry_time=_time(msg, "decider_retry_time"),
            started_by=msg.started_by,
            problems=[Finding.from_proto(f) for f in msg.problems],
        )

    def to_json(self) -> dict[str, Any]:
        return {
            **self.info.to_json(),
            "decider_state": self.decider_state,
            "execution_timeout": self.execution_timeout.total_seconds(),
            "decider_timeout": self.decider_timeout.total_seconds(),
            "cancel_requested": self.cancel_requested,
            "pending_activities": [a.to_json() for a in self.pending_activities],
            "pending_timers": [t.to_json() for t in self.pending_timers],
            "locks": [lk.to_json() for lk in self.locks],
            "decider_attempt": self.decider_attempt,
            "decider_failure": self.decider_failure,
            "decider_retry_time": rfc3339(self.decider_retry_time)
            if self.decider_retry_time
            else None,
            "started_by": self.started_by or None,
            "problems": [p.to_json() for p in self.problems],
        }


def status_name(value: int) -> str:
    name: str = c.WorkflowStatus.Name(value)  # type: ignore[arg-type]
    return name.removeprefix("WORKFLOW_STATUS_").lower()


def _time(msg: Any, name: str) -> datetime | None:
    if not msg.HasField(name):
        return None
    stamp: Timestamp = getattr(msg, name)
    return stamp.ToDatetime(tzinfo=UTC)

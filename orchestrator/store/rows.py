"""Values the store hands out, and the time conventions of its columns."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from orchestrator.engine.derived import TaskRef
from orchestrator.engine.state import RunKey
from sdk.api.weft.v1 import history_pb2 as h


def utcnow() -> datetime:
    return datetime.now(UTC)


def naive(epoch: float) -> datetime:
    """Times are stored as naive UTC: the same on both dialects."""
    return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)


def aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class TaskListKey:
    namespace: str
    kind: str
    task_list: str


@dataclass
class DbStats:
    """What this node asked of its database, for the metrics and `make bench`."""

    statements: int = 0
    transactions: int = 0
    lost_writes: int = 0
    """Writes refused because another writer came first (compare-and-set)."""


@dataclass
class Committed:
    """What a commit changed that waiting pollers, followers and the timer scanner care about."""

    task_lists: Counter[TaskListKey] = field(default_factory=Counter)  # tasks added per list
    notices: Counter[TaskListKey] = field(default_factory=Counter)  # sent per list (notices.py)
    runs_with_events: set[str] = field(default_factory=set)
    events: int = 0
    earliest_deadline: float | None = None


@dataclass(frozen=True)
class RunRow:
    key: RunKey
    workflow_type: str
    task_list: str
    status: str
    start_time: datetime
    close_time: datetime | None
    history_length: int
    continued_from_run_id: str
    parent_run_id: str = ""
    replay_of_run_id: str = ""
    replayed_by_run_id: str = ""


@dataclass(frozen=True)
class LockEntry:
    """A run's place at a lock: its holder, or one of its waiters."""

    workflow_id: str
    run_id: str
    requested_id: int
    since: datetime


@dataclass
class LockView:
    lock_name: str
    holder: LockEntry | None = None
    waiters: list[LockEntry] = field(default_factory=list)
    """In request order: the first is granted next."""


@dataclass(frozen=True)
class DueDeadline:
    run_id: str
    kind: str
    ref_id: int
    due: datetime

    def key(self) -> tuple[datetime, str, str, int]:
        """The scanner's order: by due time, ties in a fixed order (so that
        it can read on after any row, however many share its due time)."""
        return (self.due, self.run_id, self.kind, self.ref_id)


def run_row(r: Any) -> RunRow:
    return RunRow(
        key=RunKey(r.namespace, r.workflow_id, r.run_id),
        workflow_type=r.workflow_type,
        task_list=r.task_list,
        status=r.status,
        start_time=aware(r.start_time),
        close_time=aware(r.close_time) if r.close_time else None,
        history_length=r.history_length,
        continued_from_run_id=r.continued_from_run_id,
        parent_run_id=r.parent_run_id,
        replay_of_run_id=r.replay_of_run_id,
        replayed_by_run_id=r.replayed_by_run_id,
    )


def task_rows(
    namespace: str, run_id: str, refs: Iterable[TaskRef], created_at: datetime
) -> list[dict[str, Any]]:
    """The `tasks` rows of a run's new tasks (the insert both write paths do on
    SQLite, and the multi-run path on PostgreSQL)."""
    return [
        {
            "namespace": namespace,
            "kind": r.kind,
            "task_list": r.task_list,
            "run_id": run_id,
            "scheduled_id": r.scheduled_id,
            "created_at": created_at,
        }
        for r in refs
    ]


def event_rows(run_id: str, events: list[h.HistoryEvent]) -> list[dict[str, Any]]:
    """The `history_events` rows of a run's new events (the insert both write paths do)."""
    return [
        {
            "run_id": run_id,
            "event_id": e.event_id,
            "event_type": e.type,
            "timestamp": e.timestamp.ToDatetime(),
            "data": e.SerializeToString(),
        }
        for e in events
    ]

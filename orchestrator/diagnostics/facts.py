"""What the diagnosis rules look at: plain values read from the store in a few
bounded queries (`orchestrator.store.diagnostics`), with no database types, so
the rules are tested on values made by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.engine.state import RunKey
from orchestrator.store.schedules import ScheduleRow


@dataclass(frozen=True)
class ListRef:
    """A task list of the namespace diagnosed: `kind` is "decision" or "activity"."""

    kind: str
    task_list: str


@dataclass(frozen=True)
class WaitingList:
    """Tasks that have waited on one task list for at least the no-poller time."""

    ref: ListRef
    count: int
    oldest: datetime
    runs: tuple[RunKey, ...]
    """A few of their runs, longest waiting first."""


@dataclass(frozen=True)
class OverdueDeadline:
    run: RunKey
    kind: str
    due: datetime


@dataclass(frozen=True)
class LockPlace:
    """A run at a lock: its holder, or a waiter (since it got or asked for it)."""

    run: RunKey
    since: datetime


@dataclass(frozen=True)
class HeldTask:
    """A task of a lock holder that waits for a poller."""

    ref: ListRef
    created: datetime


@dataclass(frozen=True)
class LongRun:
    run: RunKey
    history_length: int


@dataclass
class Facts:
    namespace: str
    now: datetime
    no_poller_after: float
    """Seconds: a list is unpolled when nobody polled it for this long."""
    overdue_after: float
    """Seconds past its due time after which a deadline counts as overdue."""
    events_limit: int
    waiting: list[WaitingList] = field(default_factory=list)
    last_polled: dict[ListRef, datetime] = field(default_factory=dict)
    """The latest poll seen on each list of `waiting` and of `holder_tasks`."""
    overdue: list[OverdueDeadline] = field(default_factory=list)
    overdue_count: int = 0
    holders: dict[str, LockPlace] = field(default_factory=dict)
    """Lock name -> holder, for the locks that have waiters."""
    waiters: dict[str, list[LockPlace]] = field(default_factory=dict)
    """Lock name -> its waiters in request order."""
    open_runs: set[str] = field(default_factory=set)
    """Run ids of the holders (of `holders`) that are still open."""
    holder_tasks: dict[str, list[HeldTask]] = field(default_factory=dict)
    holder_overdue: dict[str, datetime] = field(default_factory=dict)
    """Holder run id -> its earliest overdue deadline."""
    long_runs: list[LongRun] = field(default_factory=list)
    schedules: list[ScheduleRow] = field(default_factory=list)
    """The namespace's schedules that are not paused."""
    truncated: bool = False
    """A query reached its bound: there may be more than is listed."""

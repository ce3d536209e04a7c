"""What one transition of one run writes, worked out before any I/O: the run
row, its new events, and the task, deadline and request-id rows that change.

Tasks and deadlines are functions of the run's state (`engine.derived`), so
the rows to write are the difference between what the state called for before
and after the transition.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict

from orchestrator.engine import derived
from orchestrator.engine.state import RunState
from orchestrator.engine.transition import Transition
from sdk.api.weft.v1 import history_pb2 as h

from .notices import closed_payload, tasks_added
from .rows import Committed, TaskListKey, naive


@dataclass(frozen=True)
class Candidate:
    """A task row a poller may claim, and its run's version when it was read."""

    task_id: int
    run_id: str
    scheduled_id: int
    version: int


class Conflict(Exception):
    """A write lost a race for a unique key (an open run of the workflow id, a
    request id) that another writer took first: nothing was written."""


@dataclass(frozen=True)
class Before:
    """What the run's state called for before the transition."""

    tasks: set[derived.TaskRef]
    deadlines: dict[tuple[str, int], float]
    locks: dict[str, derived.LockClaim]
    was_open: bool
    had_children: bool

    @classmethod
    def of(cls, state: RunState) -> Before:
        return cls(
            tasks=derived.tasks(state),
            deadlines=derived.deadlines(state),
            locks=derived.lock_claims(state),
            was_open=state.is_open,
            had_children=bool(state.children),
        )


class RunColumns(TypedDict):
    """The run row's columns a write sets besides its keys."""

    status: str
    close_time: datetime | None
    history_length: int
    state: str


@dataclass
class RunWrite:
    run_id: str
    version: int
    """The version the state was read at (0 for a new run)."""
    state: RunState
    state_json: str
    events: list[h.HistoryEvent]
    tasks_gone: list[tuple[str, int]]
    tasks_added: list[derived.TaskRef]
    deadlines_gone: list[tuple[str, int]]
    deadlines_added: list[tuple[str, int, datetime]]
    now: datetime
    request: tuple[str, str, str, str] | None = None
    """(namespace, workflow id, kind, request id): recorded, so a retry does nothing."""
    notify: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    """Other nodes' news on commit (CHANGES_CHANNEL): the run closed."""

    @property
    def is_new(self) -> bool:
        return self.version == 0

    def row(self) -> RunColumns:
        s = self.state
        return {
            "status": s.status,
            "close_time": naive(s.closed_at) if s.closed_at else None,
            "history_length": s.next_event_id - 1,
            "state": self.state_json,
        }


def multi_run(t: Transition, before: Before) -> bool:
    """Whether the transition reaches other runs than its own (a lock queue,
    signals, new runs, a parent or children to tell of a close): those are
    written under row locks, in one transaction with the runs they touch."""
    s = t.state
    if t.outbox or t.new_runs:
        return True
    if derived.lock_claims(s) != before.locks:
        return True
    closed = before.was_open and not s.is_open
    return closed and bool(s.parent_run_id or before.had_children or s.children)


def plan(
    t: Transition,
    before: Before,
    version: int,
    node_id: str,
    committed: Committed,
    request: tuple[str, str, str, str] | None = None,
) -> RunWrite:
    """The write of a single-run transition, and what its commit will tell the
    dispatcher (into `committed`)."""
    s = t.state
    after_tasks = derived.tasks(s)
    added = sorted(after_tasks - before.tasks, key=lambda r: r.scheduled_id)
    after_deadlines = derived.deadlines(s)
    gone_deadlines = [k for k, due in before.deadlines.items() if after_deadlines.get(k) != due]
    new_deadlines = [
        (k[0], k[1], naive(due))
        for k, due in after_deadlines.items()
        if before.deadlines.get(k) != due
    ]
    counts = Counter(TaskListKey(s.namespace, r.kind, r.task_list) for r in added)
    committed.task_lists.update(counts)
    if t.events:
        committed.runs_with_events.add(s.run_id)
        committed.events += len(t.events)
    if new_deadlines:
        earliest = min(due for k, due in after_deadlines.items() if before.deadlines.get(k) != due)
        if committed.earliest_deadline is None or earliest < committed.earliest_deadline:
            committed.earliest_deadline = earliest
    return RunWrite(
        run_id=s.run_id,
        version=version,
        state=s,
        state_json=s.to_json(),
        events=list(t.events),
        tasks_gone=[(r.kind, r.scheduled_id) for r in before.tasks - after_tasks],
        tasks_added=added,
        deadlines_gone=gone_deadlines,
        deadlines_added=new_deadlines,
        now=t.now,
        request=request,
        # Delivered on commit only, so a poller woken on another node finds the row.
        notify=[tasks_added(node_id, key, n) for key, n in counts.items()],
        changes=[closed_payload(node_id, s.run_id)] if before.was_open and not s.is_open else [],
    )

"""The read-only queries of `weft doctor`: what waits, since when, behind whom.

Each query is bounded (a namespace with a million waiting tasks is diagnosed
from its worst few hundred task lists, not read whole), reads only indexed
columns' ranges where it can, and nothing here takes a row lock: a diagnosis
never slows the runs it looks at. Both dialects run the same statements.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, literal, select, union, union_all

from orchestrator.diagnostics.facts import (
    Facts,
    HeldTask,
    ListRef,
    LockPlace,
    LongRun,
    OverdueDeadline,
    WaitingList,
)
from orchestrator.engine.state import RunKey

from .reads import StoreBase
from .rows import aware
from .schedules import Schedules
from .schema import deadlines, lock_waiters, locks, namespaces, pollers, runs, schedules, tasks

MAX_LISTS = 200
"""Task lists with long-waiting tasks looked at, the longest waiting first."""
MAX_OVERDUE = 100
MAX_LOCK_ROWS = 2_000
"""Holders and waiters read, over the locks that have waiters."""
MAX_LONG_RUNS = 100
SAMPLE = 20
MAX_NAMESPACES = 1_000


@dataclass(frozen=True)
class Bounds:
    """When things count as stuck (seconds), and the server's event limit."""

    no_poller_after: float
    overdue_after: float
    events_limit: int
    near_limit: float


def _naive(at: datetime) -> datetime:
    return at.replace(tzinfo=None)


class Diagnostics:
    """The store's diagnosis reads, through its connections and retries."""

    def __init__(self, store: StoreBase) -> None:
        self._store = store

    async def _rows(self, query: Any) -> list[Any]:
        return await self._store._rows(query)

    async def namespace_known(self, namespace: str) -> bool:
        """Registered, or used by a run, a poller or a schedule (namespaces exist
        implicitly)."""
        for table, column in (
            (namespaces, namespaces.c.name),
            (runs, runs.c.namespace),
            (pollers, pollers.c.namespace),
            (schedules, schedules.c.namespace),
        ):
            if await self._rows(
                select(literal(1)).select_from(table).where(column == namespace).limit(1)
            ):
                return True
        return False

    async def active_namespaces(self) -> list[str]:
        """Namespaces with open runs or running schedules (what the periodic pass
        for the metrics looks at)."""
        with_runs = select(runs.c.namespace.label("namespace")).where(runs.c.status == "open")
        with_schedules = select(schedules.c.namespace.label("namespace")).where(
            schedules.c.paused.is_(False)
        )
        both = union(with_runs, with_schedules).subquery()
        rows = await self._rows(
            select(both.c.namespace).order_by(both.c.namespace).limit(MAX_NAMESPACES)
        )
        return [r.namespace for r in rows]

    async def namespace_facts(self, namespace: str, now: datetime, bounds: Bounds) -> Facts:
        facts = _blank(namespace, now, bounds)
        await self._waiting(facts, now - timedelta(seconds=bounds.no_poller_after))
        await self._overdue(facts, now - timedelta(seconds=bounds.overdue_after))
        await self._locks(facts, now - timedelta(seconds=bounds.overdue_after))
        await self._long_runs(facts, int(bounds.events_limit * bounds.near_limit))
        await self._last_polled(facts)
        facts.schedules = [
            row for row in await Schedules(self._store).find(namespace) if not row.paused
        ]
        return facts

    async def run_facts(
        self, run: RunKey, history_length: int, waits_for_lock: bool, now: datetime, bounds: Bounds
    ) -> Facts:
        """The facts that can name one run: its own tasks and deadlines, its
        history, and (only when it waits for a lock) the namespace's lock chains."""
        facts = _blank(run.namespace, now, bounds)
        wait_cutoff = _naive(now - timedelta(seconds=bounds.no_poller_after))
        t = tasks.c
        rows = await self._rows(
            select(t.kind, t.task_list, func.count().label("n"), func.min(t.created_at).label("at"))
            .where(t.run_id == run.run_id, t.created_at <= wait_cutoff)
            .group_by(t.kind, t.task_list)
        )
        facts.waiting = [
            WaitingList(ListRef(r.kind, r.task_list), int(r.n), aware(r.at), (run,)) for r in rows
        ]
        overdue_cutoff = _naive(now - timedelta(seconds=bounds.overdue_after))
        rows = await self._rows(
            select(deadlines.c.kind, deadlines.c.due)
            .where(deadlines.c.run_id == run.run_id, deadlines.c.due <= overdue_cutoff)
            .order_by(deadlines.c.due)
            .limit(MAX_OVERDUE)
        )
        facts.overdue = [OverdueDeadline(run, r.kind, aware(r.due)) for r in rows]
        facts.overdue_count = len(facts.overdue)
        if waits_for_lock:
            await self._locks(facts, now - timedelta(seconds=bounds.overdue_after))
        if history_length >= int(bounds.events_limit * bounds.near_limit):
            facts.long_runs = [LongRun(run, history_length)]
        await self._last_polled(facts)
        return facts

    # -- the parts ------------------------------------------------------------------

    async def _waiting(self, facts: Facts, cutoff: datetime) -> None:
        """Task lists whose tasks have waited since before `cutoff`, and a few runs of each."""
        t = tasks.c
        old = and_(t.namespace == facts.namespace, t.created_at <= _naive(cutoff))
        groups = await self._rows(
            select(t.kind, t.task_list, func.count().label("n"), func.min(t.created_at).label("at"))
            .where(old)
            .group_by(t.kind, t.task_list)
            .order_by(func.min(t.created_at))
            .limit(MAX_LISTS + 1)
        )
        if len(groups) > MAX_LISTS:
            facts.truncated, groups = True, groups[:MAX_LISTS]
        if not groups:
            return
        names = {g.task_list for g in groups}
        place = func.row_number().over(partition_by=(t.kind, t.task_list), order_by=t.id)
        ranked = (
            select(t.kind, t.task_list, t.run_id, place.label("place"))
            .where(old, t.task_list.in_(names))
            .subquery()
        )
        sample = await self._rows(
            select(ranked.c.kind, ranked.c.task_list, runs.c.run_id, runs.c.workflow_id)
            .join(runs, runs.c.run_id == ranked.c.run_id)
            .where(ranked.c.place <= SAMPLE)
            .order_by(ranked.c.kind, ranked.c.task_list, ranked.c.place)
        )
        by_list: dict[ListRef, list[RunKey]] = {}
        for r in sample:
            key = RunKey(facts.namespace, r.workflow_id, r.run_id)
            by_list.setdefault(ListRef(r.kind, r.task_list), []).append(key)
        for g in groups:
            ref = ListRef(g.kind, g.task_list)
            runs_of = tuple(dict.fromkeys(by_list.get(ref, [])))
            facts.waiting.append(WaitingList(ref, int(g.n), aware(g.at), runs_of))

    async def _overdue(self, facts: Facts, cutoff: datetime) -> None:
        d, r = deadlines.c, runs.c
        where = and_(r.namespace == facts.namespace, d.due <= _naive(cutoff))
        joined = deadlines.join(runs, r.run_id == d.run_id)
        rows = await self._rows(
            select(d.run_id, d.kind, d.due, r.workflow_id)
            .select_from(joined)
            .where(where)
            .order_by(d.due)
            .limit(MAX_OVERDUE)
        )
        facts.overdue = [
            OverdueDeadline(RunKey(facts.namespace, x.workflow_id, x.run_id), x.kind, aware(x.due))
            for x in rows
        ]
        facts.overdue_count = len(rows)
        if len(rows) == MAX_OVERDUE:
            [total] = await self._rows(
                select(func.count().label("n")).select_from(joined).where(where)
            )
            facts.overdue_count = int(total.n)

    async def _locks(self, facts: Facts, overdue_cutoff: datetime) -> None:
        """The locks that have waiters: holders and queues in one statement (one
        snapshot, so a grant is never seen half done), then what their holders wait on."""
        ns = facts.namespace
        queued_names = select(lock_waiters.c.lock_name).where(lock_waiters.c.namespace == ns)
        cols = ("lock_name", "run_id", "workflow_id", "since")
        held = select(*(locks.c[n] for n in cols), literal(0).label("place")).where(
            locks.c.namespace == ns, locks.c.lock_name.in_(queued_names)
        )
        queued = select(*(lock_waiters.c[n] for n in cols), lock_waiters.c.id.label("place")).where(
            lock_waiters.c.namespace == ns
        )
        both = union_all(held, queued).subquery()
        rows = await self._rows(
            select(both).order_by(both.c.lock_name, both.c.place).limit(MAX_LOCK_ROWS + 1)
        )
        if len(rows) > MAX_LOCK_ROWS:
            facts.truncated, rows = True, rows[:MAX_LOCK_ROWS]
        for r in rows:
            place = LockPlace(RunKey(ns, r.workflow_id, r.run_id), aware(r.since))
            if r.place == 0:
                facts.holders[r.lock_name] = place
            else:
                facts.waiters.setdefault(r.lock_name, []).append(place)
        holder_ids = {p.run.run_id for p in facts.holders.values()}
        if not holder_ids:
            return
        found = await self._rows(
            select(runs.c.run_id).where(runs.c.run_id.in_(holder_ids), runs.c.status == "open")
        )
        facts.open_runs = {r.run_id for r in found}
        for r in await self._rows(
            select(tasks.c.run_id, tasks.c.kind, tasks.c.task_list, tasks.c.created_at).where(
                tasks.c.run_id.in_(holder_ids)
            )
        ):
            facts.holder_tasks.setdefault(r.run_id, []).append(
                HeldTask(ListRef(r.kind, r.task_list), aware(r.created_at))
            )
        for r in await self._rows(
            select(deadlines.c.run_id, func.min(deadlines.c.due).label("due"))
            .where(deadlines.c.run_id.in_(holder_ids), deadlines.c.due <= _naive(overdue_cutoff))
            .group_by(deadlines.c.run_id)
        ):
            facts.holder_overdue[r.run_id] = aware(r.due)

    async def _long_runs(self, facts: Facts, threshold: int) -> None:
        r = runs.c
        rows = await self._rows(
            select(r.run_id, r.workflow_id, r.history_length)
            .where(
                r.namespace == facts.namespace, r.status == "open", r.history_length >= threshold
            )
            .order_by(r.history_length.desc())
            .limit(MAX_LONG_RUNS + 1)
        )
        if len(rows) > MAX_LONG_RUNS:
            facts.truncated, rows = True, rows[:MAX_LONG_RUNS]
        facts.long_runs = [
            LongRun(RunKey(facts.namespace, x.workflow_id, x.run_id), int(x.history_length))
            for x in rows
        ]

    async def _last_polled(self, facts: Facts) -> None:
        """The latest written sighting on each list the other facts name."""
        refs = {w.ref for w in facts.waiting} | {
            task.ref for held in facts.holder_tasks.values() for task in held
        }
        if not refs:
            return
        p = pollers.c
        rows = await self._rows(
            select(p.kind, p.task_list, func.max(p.last_seen).label("at"))
            .where(p.namespace == facts.namespace, p.task_list.in_({ref.task_list for ref in refs}))
            .group_by(p.kind, p.task_list)
        )
        for r in rows:
            ref = ListRef(r.kind, r.task_list)
            if ref in refs:
                facts.last_polled[ref] = aware(r.at)


def _blank(namespace: str, now: datetime, bounds: Bounds) -> Facts:
    return Facts(
        namespace=namespace,
        now=now,
        no_poller_after=bounds.no_poller_after,
        overdue_after=bounds.overdue_after,
        events_limit=bounds.events_limit,
    )

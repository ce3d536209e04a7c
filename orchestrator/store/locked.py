"""Writes under row locks (`SELECT ... FOR UPDATE` on PostgreSQL; SQLite has one
writer at a time), each in one SQLAlchemy transaction:

    lock the run row -> load state -> engine -> append events, write state,
    sync task, deadline and lock rows -> commit -> tell the dispatcher

This is the path of whatever reaches other runs than its own (a lock's queue,
signals between runs, children and their parent), of the deadline scanner's
skip-if-busy writes, of replays and of the purge. A single run's ordinary
transitions take the hot path of `store.py` instead. Every write here bumps the
run's version, so the hot path's cached copies of these runs stop matching.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar, overload

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from orchestrator.engine import children as family
from orchestrator.engine import derived, external
from orchestrator.engine import locks as lock_rules
from orchestrator.engine.errors import Aborted, AlreadyExists, NotFound, ResourceExhausted
from orchestrator.engine.events import CLOSE_EVENTS
from orchestrator.engine.state import ChildState, RunKey, RunState
from orchestrator.engine.transition import OutboundSignal, Transition, apply

from . import dialect, purge
from .notices import CHANGES_CHANNEL, NOTIFY_CHANNEL, closed_payload, tasks_added
from .reads import StoreBase
from .rows import (
    Committed,
    RunRow,
    TaskListKey,
    event_rows,
    naive,
    task_rows,
    utcnow,
)
from .schema import (
    deadlines,
    history_events,
    lock_waiters,
    locks,
    request_ids,
    runs,
    tasks,
)

T = TypeVar("T")
# The statements of the locked path, built once.
_RUN_STATE = select(runs.c.state).where(runs.c.run_id == bindparam("run_id"))
_LOCK_RUN = {is_pg: dialect.for_update(_RUN_STATE, is_pg) for is_pg in (False, True)}
_LOCK_RUN_UNLESS_BUSY = _RUN_STATE.with_for_update(skip_locked=True)
_UPDATE_RUN = (
    update(runs).where(runs.c.run_id == bindparam("key_run_id")).values(version=runs.c.version + 1)
)
_DELETE_TASK = delete(tasks).where(
    tasks.c.run_id == bindparam("run_id"),
    tasks.c.kind == bindparam("kind"),
    tasks.c.scheduled_id == bindparam("scheduled_id"),
)
_DELETE_DEADLINE = delete(deadlines).where(
    deadlines.c.run_id == bindparam("run_id"),
    deadlines.c.kind == bindparam("kind"),
    deadlines.c.ref_id == bindparam("ref_id"),
)
_LOCK_HOLDER = select(locks.c.run_id).where(
    locks.c.namespace == bindparam("namespace"), locks.c.lock_name == bindparam("lock_name")
)
_NEXT_WAITER = (
    select(lock_waiters.c.run_id)
    .where(
        lock_waiters.c.namespace == bindparam("namespace"),
        lock_waiters.c.lock_name == bindparam("lock_name"),
    )
    .order_by(lock_waiters.c.id)
    .limit(1)
)
# Every change to one lock's rows is serialised by a transaction-scoped advisory
# lock on its name (PostgreSQL; SQLite has one writer at a time anyway), so two
# runs asking for a free lock at once cannot both see it free, and the queue
# order is the order in which the requests committed.
_OPEN_RUN = select(runs.c.run_id).where(
    runs.c.namespace == bindparam("namespace"),
    runs.c.workflow_id == bindparam("workflow_id"),
    runs.c.status == "open",
)


def _receive(out: OutboundSignal, t: Transition) -> None:
    external.signal(t, out.signal_name, out.input, out.identity, out.limits)


class LockedWrites(StoreBase):
    """Writes under row locks, in one SQLAlchemy transaction: what reaches other
    runs than its own (lock queues, signals between runs, children, a parent), the
    deadline scanner's skip-if-busy writes, replays and the purge."""

    def _committed_locked(self, committed: Committed, *run_ids: str) -> None:
        """After a locked write: every run it wrote is out of date in the cache."""
        for run_id in (*run_ids, *committed.runs_with_events):
            self.cache.evict(run_id)
        self._on_commit(committed)

    async def locked_transact(self, run_id: str, fn: Callable[[Transition], T]) -> T:
        """Apply one engine command to an existing run under its row lock, atomically."""

        async def attempt() -> T:
            committed = Committed()
            async with self._write() as conn:
                state = await self._lock_run(conn, run_id)
                result = await self._apply(conn, state, fn, committed, is_new=False)
            self._committed_locked(committed, run_id)
            return result

        result: T = await self._retrying(attempt)
        return result

    async def locked_transact_once(
        self, run_id: str, kind: str, request_id: str, fn: Callable[[Transition], T]
    ) -> T | None:
        """`locked_transact`, recording `request_id` in the same transaction so a
        retry appends nothing."""

        async def attempt() -> T | None:
            committed = Committed()
            async with self._write() as conn:
                state = await self._lock_run(conn, run_id)
                seen = await conn.scalar(
                    select(request_ids.c.run_id).where(
                        request_ids.c.namespace == state.namespace,
                        request_ids.c.workflow_id == state.workflow_id,
                        request_ids.c.kind == kind,
                        request_ids.c.request_id == request_id,
                    )
                )
                if seen is not None:
                    return None
                result = await self._apply(conn, state, fn, committed, is_new=False)
                await conn.execute(
                    insert(request_ids).values(
                        namespace=state.namespace,
                        workflow_id=state.workflow_id,
                        kind=kind,
                        request_id=request_id,
                        run_id=run_id,
                        created_at=naive(utcnow().timestamp()),
                    )
                )
            self._committed_locked(committed, run_id)
            return result

        out: T | None = await self._retrying(attempt)
        return out

    async def transact_unless_busy(self, run_id: str, fn: Callable[[Transition], T]) -> T | None:
        """`transact`, or None at once if another transaction holds the run (PostgreSQL).

        For the deadline scanners: a node skips a run that another node (or a
        command) is working on instead of queueing behind it, so N nodes spread
        the due rows between them; a row still due is seen again on the next pass.
        """

        async def attempt() -> T | None:
            committed = Committed()
            async with self._write() as conn:
                state = await self._lock_run(conn, run_id, skip_locked=True)
                if state is None:
                    return None
                result = await self._apply(conn, state, fn, committed, is_new=False)
            self._committed_locked(committed, run_id)
            return result

        out: T | None = await self._retrying(attempt)
        return out

    @overload
    async def _lock_run(self, conn: AsyncConnection, run_id: str) -> RunState: ...

    @overload
    async def _lock_run(
        self, conn: AsyncConnection, run_id: str, *, skip_locked: bool
    ) -> RunState | None: ...

    async def _lock_run(
        self, conn: AsyncConnection, run_id: str, *, skip_locked: bool = False
    ) -> RunState | None:
        key = {"run_id": run_id}
        if self.is_pg and skip_locked:
            # Tell "busy" apart from "gone": only a missing row is NOT_FOUND.
            raw = await conn.scalar(_LOCK_RUN_UNLESS_BUSY, key)
            if raw is None and await conn.scalar(_RUN_STATE, key):
                return None
        else:
            raw = await conn.scalar(_LOCK_RUN[self.is_pg], key)
        if raw is None:
            raise NotFound(f"run {run_id} not found")
        return RunState.from_json(raw)

    async def _apply(
        self,
        conn: AsyncConnection,
        state: RunState,
        fn: Callable[[Transition], T],
        committed: Committed,
        is_new: bool,
    ) -> T:
        before_tasks = derived.tasks(state)
        before_deadlines = derived.deadlines(state)
        before_locks = derived.lock_claims(state)
        was_open, before_children = state.is_open, list(state.children.values())
        t = Transition(state, utcnow())
        result = apply(t, fn)
        if t.events or t.state_changed or is_new:
            await self._persist(conn, t, before_tasks, before_deadlines, is_new, committed)
            carried = await self._carry_locks(conn, t, before_locks)
            left = {n: claim for n, claim in before_locks.items() if n not in carried}
            await self._sync_locks(conn, t.state, left, committed)
            await self._deliver(conn, t, committed)
            if was_open and not t.state.is_open:
                await self._closed(conn, t, before_children, committed)
        return result

    async def _persist(
        self,
        conn: AsyncConnection,
        t: Transition,
        before_tasks: set[derived.TaskRef],
        before_deadlines: dict[tuple[str, int], float],
        is_new: bool,
        committed: Committed,
    ) -> None:
        s = t.state
        if t.events:
            await conn.execute(
                insert(history_events),
                event_rows(s.run_id, t.events),
            )
            committed.runs_with_events.add(s.run_id)
            committed.events += len(t.events)
        row = {
            "status": s.status,
            "close_time": naive(s.closed_at) if s.closed_at else None,
            "history_length": s.next_event_id - 1,
            "state": s.to_json(),
        }
        if is_new:
            await conn.execute(
                insert(runs).values(
                    run_id=s.run_id,
                    namespace=s.namespace,
                    workflow_id=s.workflow_id,
                    workflow_type=s.type_name,
                    task_list=s.task_list,
                    start_time=naive(s.started_at),
                    continued_from_run_id=s.continued_from_run_id,
                    parent_run_id=s.parent_run_id,
                    replay_of_run_id=s.replay_of_run_id,
                    version=1,
                    **row,
                )
            )
        else:
            await conn.execute(_UPDATE_RUN, {"key_run_id": s.run_id, **row})
        await self._sync_tasks(conn, s, before_tasks, committed)
        await self._sync_deadlines(conn, s, before_deadlines, committed)
        for successor in t.new_runs:
            await self._persist(conn, successor, set(), {}, True, committed)

    async def _sync_tasks(
        self, conn: AsyncConnection, s: RunState, before: set[derived.TaskRef], c: Committed
    ) -> None:
        after = derived.tasks(s)
        gone = [
            {"run_id": s.run_id, "kind": ref.kind, "scheduled_id": ref.scheduled_id}
            for ref in before - after
        ]
        if gone:
            await conn.execute(_DELETE_TASK, gone)
        added = after - before
        if not added:
            return
        now = naive(utcnow().timestamp())
        in_order = sorted(added, key=lambda r: r.scheduled_id)
        await conn.execute(insert(tasks), task_rows(s.namespace, s.run_id, in_order, now))
        counts = Counter(TaskListKey(s.namespace, r.kind, r.task_list) for r in added)
        c.task_lists.update(counts)
        # Transactional: delivered on commit only, so a poller woken on
        # another node always finds the row.
        for key, n in counts.items():
            payload = tasks_added(self.node_id, key, n, nth=c.notices[key])
            c.notices[key] += 1  # (another run's tasks on this list in this transaction)
            await dialect.notify(conn, self.is_pg, NOTIFY_CHANNEL, payload)

    async def _sync_deadlines(
        self,
        conn: AsyncConnection,
        s: RunState,
        before: dict[tuple[str, int], float],
        c: Committed,
    ) -> None:
        after = derived.deadlines(s)
        changed = [
            {"run_id": s.run_id, "kind": key[0], "ref_id": key[1]}
            for key, due in before.items()
            if after.get(key) != due
        ]
        if changed:
            await conn.execute(_DELETE_DEADLINE, changed)
        added = [(k, due) for k, due in after.items() if before.get(k) != due]
        if added:
            await conn.execute(
                insert(deadlines),
                [
                    {"run_id": s.run_id, "kind": k[0], "ref_id": k[1], "due": naive(due)}
                    for k, due in added
                ],
            )
            earliest = min(due for _, due in added)
            if c.earliest_deadline is None or earliest < c.earliest_deadline:
                c.earliest_deadline = earliest

    async def _carry_locks(
        self, conn: AsyncConnection, t: Transition, before: dict[str, derived.LockClaim]
    ) -> set[str]:
        """Hand the lock rows of a run that continued as new to its new run: the
        holder row (or the place in the queue) changes owner in this transaction,
        so the lock is never free and no waiter is granted it in between. The
        names handed on; `_sync_locks` then settles the run's other locks."""
        carried = {
            name: (successor.state.run_id, claim)
            for successor in t.new_runs
            for name, claim in derived.lock_claims(successor.state).items()
        }
        if not carried:
            return set()
        # All of the run's names, sorted, as `_sync_locks` takes them.
        names = sorted(before.keys() | carried.keys())
        await dialect.lock_names(conn, self.is_pg, (f"{t.state.namespace}/{n}" for n in names))
        for name, (new_run_id, claim) in carried.items():
            table = locks if claim.held else lock_waiters
            moved = await conn.execute(
                update(table)
                .where(
                    table.c.namespace == t.state.namespace,
                    table.c.lock_name == name,
                    table.c.run_id == t.state.run_id,
                )
                .values(run_id=new_run_id, requested_id=claim.requested_id)
            )
            if moved.rowcount != 1:
                raise AssertionError(f"run {t.state.run_id} has no row for lock {name!r} to carry")
        return set(carried)

    async def _sync_locks(
        self,
        conn: AsyncConnection,
        s: RunState,
        before: dict[str, derived.LockClaim],
        c: Committed,
    ) -> None:
        """Write this run's lock rows as its state now calls for, then grant each
        lock it let go of (or asked for while free) to the first in its queue.

        The grant is applied to the waiter's run in this same transaction: a
        release and the next holder's LockAcquired commit together, so a crash
        can lose neither.
        """
        after = derived.lock_claims(s)
        if not before and not after:
            return
        changed = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
        # Sorted, so that two transactions take shared names in one order.
        await dialect.lock_names(conn, self.is_pg, (f"{s.namespace}/{n}" for n in changed))
        to_settle: list[tuple[str, str, str]] = []  # (lock, previous holder's workflow id, run id)
        for name in changed:
            old, new = before.get(name), after.get(name)
            if old is not None:
                table = locks if old.held else lock_waiters
                await conn.execute(
                    delete(table).where(
                        table.c.namespace == s.namespace,
                        table.c.lock_name == name,
                        table.c.run_id == s.run_id,
                    )
                )
                if old.held:
                    to_settle.append((name, s.workflow_id, s.run_id))
            if new is not None:
                await conn.execute(
                    insert(locks if new.held else lock_waiters).values(
                        namespace=s.namespace,
                        lock_name=name,
                        run_id=s.run_id,
                        workflow_id=s.workflow_id,
                        requested_id=new.requested_id,
                        since=naive(new.since),
                    )
                )
                if not new.held and (old is None or old.held):
                    to_settle.append((name, "", ""))  # a new request: the lock may be free
        for name, prev_workflow, prev_run in to_settle:
            await self._grant_next(conn, s.namespace, name, prev_workflow, prev_run, c)

    async def _grant_next(
        self,
        conn: AsyncConnection,
        namespace: str,
        name: str,
        prev_workflow: str,
        prev_run: str,
        c: Committed,
    ) -> None:
        where = {"namespace": namespace, "lock_name": name}
        if await conn.scalar(_LOCK_HOLDER, where) is not None:
            return
        waiter = await conn.scalar(_NEXT_WAITER, where)
        if waiter is None:
            return
        state = await self._lock_run(conn, waiter)
        await self._apply(
            conn,
            state,
            lambda t: lock_rules.grant(t, name, prev_workflow, prev_run),
            c,
            is_new=False,
        )

    async def replay_closed(
        self, old: RunRow, new_run_id: str, fn: Callable[[Transition], None]
    ) -> None:
        """Open `new_run_id` for the closed run `old` (`fn` writes its first events)
        and link the two, in one transaction. AlreadyExists if the workflow id has
        an open run (the unique index decides it across nodes)."""

        async def attempt() -> None:
            committed = Committed()
            async with self._write() as conn:
                key = old.key
                # Under the old run's lock: two replays of it cannot both pass.
                await self._lock_run(conn, key.run_id)
                done = await conn.scalar(
                    select(runs.c.replayed_by_run_id).where(runs.c.run_id == key.run_id)
                )
                if done:
                    raise AlreadyExists(f"run {key.run_id} was replayed already, by run {done}")
                state = RunState.blank(RunKey(key.namespace, key.workflow_id, new_run_id))
                await self._apply(conn, state, fn, committed, is_new=True)
                await conn.execute(
                    update(runs)
                    .where(runs.c.run_id == key.run_id)
                    .values(replayed_by_run_id=new_run_id)
                )
            self._committed_locked(committed, key.run_id, new_run_id)

        try:
            await self._retrying(attempt, unique_ok=True)
        except IntegrityError as exc:
            raise AlreadyExists(
                f"workflow {old.key.workflow_id!r} has an open run: replay that one instead"
            ) from exc

    async def purge_closed(self, now: datetime) -> int | None:
        """One retention pass (purge.py): runs deleted, or None if another node
        was purging."""

        if self.is_pg:

            async def attempt() -> int | None:
                # One transaction, under the purge lock: one node at a time.
                async with self._write() as conn:
                    if not await purge.take_purge_lock(conn):
                        return None
                    return await purge.delete_runs(conn, await purge.expired_runs(conn, now))

            out: int | None = await self._retrying(attempt)
            return out

        # SQLite: plan in a read, so that writers are held up only by the delete.
        async def plan() -> list[str]:
            async with self._engine.connect() as conn:
                found = await purge.expired_runs(conn, now)
                await conn.commit()
                return found

        doomed: list[str] = await self._retrying(plan)

        async def remove() -> int:
            async with self._write() as conn:
                return await purge.delete_runs(conn, doomed)

        deleted: int = await self._retrying(remove)
        return deleted

    async def _deliver(self, conn: AsyncConnection, t: Transition, c: Committed) -> None:
        """Append this transition's signals to the runs they go to."""
        for out in t.outbox:
            target = await self._lock_run(conn, out.run_id)
            if not target.is_open:
                # It closed after the decision was read: the decider answers again
                # (ABORTED is retried) and this time learns the signal failed.
                raise Aborted(f"run {out.run_id} closed before the signal reached it")
            try:
                await self._apply(conn, target, functools.partial(_receive, out), c, is_new=False)
            except ResourceExhausted as exc:
                # It filled up after the decision was read: decide again (as above).
                raise Aborted(f"run {out.run_id} cannot take the signal now: {exc}") from None

    async def _closed(
        self,
        conn: AsyncConnection,
        t: Transition,
        before_children: list[ChildState],
        c: Committed,
    ) -> None:
        """A run closed: tell its parent, apply its children's close policies, and
        wake whoever follows it on another node."""
        s = t.state
        await dialect.notify(
            conn, self.is_pg, CHANGES_CHANNEL, closed_payload(self.node_id, s.run_id)
        )
        close = next(e for e in reversed(t.events) if e.type in CLOSE_EVENTS)
        if s.parent_run_id and close.type != "WorkflowContinuedAsNew":
            # (A child that continued as new goes on as the same child.)
            try:
                parent = await self._lock_run(conn, s.parent_run_id)
            except NotFound:
                parent = None  # purged by retention: nobody to tell
            if parent is not None:
                await self._apply(
                    conn, parent, lambda tt: family.report_child_close(tt, s, close), c, False
                )
        for link in family.children_to_close(before_children, t.events):
            where = {"namespace": s.namespace, "workflow_id": link.workflow_id}
            run_id = await conn.scalar(_OPEN_RUN, where)
            while run_id:
                child = await self._lock_run(conn, run_id)
                if child.is_open:
                    policy = functools.partial(family.apply_parent_close, parent=s, link=link)
                    await self._apply(conn, child, policy, c, is_new=False)
                    break
                # It continued as new while we waited for its row: follow it.
                run_id = child.continued_as_new_run_id

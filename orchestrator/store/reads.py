"""The store's connections, retry policy and read-only queries (nothing is
written here: see `store.py` and `locked.py` for the runs, `upkeep_writes.py`
for the rest)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

import structlog
from sqlalchemy import event, func, literal, or_, select, tuple_, union_all
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from orchestrator.engine.defaults import RegisteredActivityType, RegisteredWorkflowType
from orchestrator.engine.errors import Aborted, InvalidArgument, NotFound, Unavailable
from orchestrator.engine.state import RunState
from sdk.api.weft.v1 import history_pb2 as h

from . import dialect
from .cache import RunCache
from .registrations import Registered, TypeCache, activity_type_of, workflow_type_of
from .rows import (
    Committed,
    DbStats,
    DueDeadline,
    LockEntry,
    LockView,
    RunRow,
    TaskListKey,
    aware,
    naive,
    run_row,
    utcnow,
)
from .schema import (
    activity_types,
    deadlines,
    history_events,
    lock_waiters,
    locks,
    namespaces,
    pollers,
    request_ids,
    runs,
    tasks,
    workflow_types,
)

T = TypeVar("T")
log = structlog.get_logger("weft.store")
_RETRIES = 8


def _translate(exc: DBAPIError) -> Exception:
    """The domain error for a database error we will not retry (any more)."""
    if isinstance(exc, DataError):
        # Input the validators let through but a column cannot hold.
        return InvalidArgument(
            f"a value does not fit the database: {str(exc.orig).splitlines()[0]}"
        )
    if dialect.is_conflict(exc) or isinstance(exc, IntegrityError):
        return Aborted(f"lost a concurrent update, try again: {exc.orig}")
    return Unavailable(f"database unavailable: {exc.orig or exc}")


def _count_into(stats: DbStats, engine: AsyncEngine) -> None:
    def statement(*_: Any) -> None:
        stats.statements += 1

    def transaction(*_: Any) -> None:
        stats.transactions += 1

    event.listen(engine.sync_engine, "before_cursor_execute", statement)
    event.listen(engine.sync_engine, "commit", transaction)


class StoreBase:
    def __init__(self, engine: AsyncEngine, on_commit: Callable[[Committed], None]) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{dialect.WRITE: True})
        self.is_pg = engine.dialect.name == "postgresql"
        # A read is one statement, its own snapshot: on PostgreSQL it runs in
        # autocommit, one round trip where BEGIN, the query and COMMIT were three.
        self._reader = (
            engine.execution_options(isolation_level="AUTOCOMMIT") if self.is_pg else engine
        )
        self._on_commit = on_commit
        self._attempts: set[asyncio.Future[Any]] = set()
        self.node_id = uuid.uuid4().hex[:16]  # tells this node's NOTIFYs from others'
        self.stats = DbStats()
        _count_into(self.stats, engine)
        self.cache = RunCache()
        self.types = TypeCache()

    async def close(self) -> None:
        # Attempts whose callers were cancelled are still finishing: let them give
        # their connections back before the pool goes.
        if self._attempts:
            await asyncio.wait(set(self._attempts), timeout=10)
        await self._engine.dispose()

    async def _to_the_end(self, attempt: Callable[[], Any]) -> Any:
        """Run one attempt in a task of its own that a cancelled caller does not cut short.

        gRPC cancels a handler when its client gives up (a worker stopping cancels
        its polls). Cancelled mid-statement, SQLAlchemy terminates the connection,
        and an aiosqlite connection terminated that way can leave a close that
        never finishes. Shielded, the transaction commits or rolls back as usual
        and the caller still returns at once; an outcome nobody waits for is
        dropped.
        """
        task = asyncio.ensure_future(attempt())
        self._attempts.add(task)
        task.add_done_callback(self._attempt_done)
        return await asyncio.shield(task)

    def _attempt_done(self, task: asyncio.Future[Any]) -> None:
        self._attempts.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: its caller may be gone, with the client that asked

    # -- connections and retries -------------------------------------------------

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction. A failure of the COMMIT itself is not retried: the
        commit may have landed, and running the command again could apply it twice."""
        async with self._writer.connect() as conn:
            await conn.begin()
            try:
                yield conn
            except BaseException:
                await conn.rollback()
                raise
            try:
                await conn.commit()
            except DBAPIError as exc:
                raise Unavailable(
                    f"database connection lost while committing; the outcome is unknown: {exc.orig}"
                ) from exc

    async def _rows(self, query: Any) -> list[Any]:
        """Run a read; reads are safe to repeat, so a lost connection is retried."""

        async def attempt() -> list[Any]:
            async with self._reader.connect() as conn:
                rows = list((await conn.execute(query)).all())
                # COMMIT, not the pool's ROLLBACK: psycopg forgets its prepared
                # statements on every rollback (in autocommit, neither is sent).
                await conn.commit()
                return rows

        rows: list[Any] = await self._retrying(attempt)
        return rows

    async def _first(self, query: Any) -> Any:
        rows = await self._rows(query.limit(1))
        return rows[0] if rows else None

    async def _retrying(
        self, attempt: Callable[[], Any], *, unique_ok: bool = False, own_task: bool = False
    ) -> Any:
        """Run a whole transaction again when the database says it may succeed now.

        A unique violation is ABORTED (a concurrent writer won), unless the
        caller handles it itself (`unique_ok`). Each attempt runs to its end
        even if the caller is cancelled (`_to_the_end`), unless the caller
        already runs in a task of its own that no client's cancellation reaches
        (`own_task`: the hot path's SQLite write, run by `pending.drive`).
        """
        delay = 0.02
        for n in range(_RETRIES):
            try:
                return await (attempt() if own_task else self._to_the_end(attempt))
            except DBAPIError as exc:
                if isinstance(exc, IntegrityError) and unique_ok:
                    raise
                if not dialect.is_retryable(exc) or n == _RETRIES - 1:
                    raise _translate(exc) from exc
                log.warning("db.retry", error=str(exc.orig or exc)[:200], attempt=n + 1)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    # -- reads ------------------------------------------------------------------

    async def find_run(self, namespace: str, workflow_id: str, run_id: str = "") -> RunRow:
        """The named run; without a run id, the open run, else the latest one."""
        query = select(runs).where(runs.c.namespace == namespace, runs.c.workflow_id == workflow_id)
        if run_id:
            query = query.where(runs.c.run_id == run_id)
        else:
            # Open first, then the most recent start.
            query = query.order_by((runs.c.status == "open").desc(), runs.c.start_time.desc())
        row = await self._first(query)
        if row is None:
            what = f"run {run_id} of workflow" if run_id else "workflow"
            raise NotFound(f"{what} {workflow_id!r} not found in namespace {namespace!r}")
        return run_row(row)

    async def request_run(
        self, namespace: str, workflow_id: str, kind: str, request_id: str
    ) -> str | None:
        """The run a request id was recorded on (a start's run), or None if it is new."""
        row = await self._first(
            select(request_ids.c.run_id).where(
                request_ids.c.namespace == namespace,
                request_ids.c.workflow_id == workflow_id,
                request_ids.c.kind == kind,
                request_ids.c.request_id == request_id,
            )
        )
        return str(row.run_id) if row is not None else None

    async def open_run(self, namespace: str, workflow_id: str) -> str | None:
        row = await self._first(
            select(runs.c.run_id).where(
                runs.c.namespace == namespace,
                runs.c.workflow_id == workflow_id,
                runs.c.status == "open",
            )
        )
        return str(row.run_id) if row is not None else None

    async def load_state(self, run_id: str) -> RunState:
        row = await self._first(select(runs.c.state).where(runs.c.run_id == run_id))
        if row is None:
            raise NotFound(f"run {run_id} not found")
        return RunState.from_json(row.state)

    async def read_history(
        self,
        run_id: str,
        first_id: int,
        last_id: int | None,
        limit: int,
        max_bytes: int | None = None,
    ) -> list[h.HistoryEvent]:
        """Events from `first_id` (to `last_id`), at most `limit` of them and, with
        `max_bytes`, no more bytes than that, but always the first one: a page of
        large payloads stays within what a client can receive (`max_bytes`, or
        one event if that alone is larger)."""
        ev = history_events.c
        query = select(ev.event_id, ev.data).where(ev.run_id == run_id, ev.event_id >= first_id)
        if last_id is not None:
            query = query.where(ev.event_id <= last_id)
        query = query.order_by(ev.event_id).limit(limit)
        if max_bytes is not None:
            # The bytes up to each row, over at most `limit` rows; the rows that
            # end within the budget are sent back, and the first in any case.
            page = query.subquery()
            size = func.length(page.c.data)
            through = func.sum(size).over(order_by=page.c.event_id).label("through")
            windowed = select(page.c.event_id, page.c.data, size.label("size"), through).subquery()
            w = windowed.c
            query = (
                select(w.event_id, w.data)
                .where(or_(w.through <= max_bytes, w.through == w.size))
                .order_by(w.event_id)
            )
        rows = await self._rows(query)
        return [h.HistoryEvent.FromString(r.data) for r in rows]

    async def list_runs(
        self,
        namespace: str,
        *,
        open_only: bool | None,
        workflow_type: str,
        workflow_id: str,
        start_from: datetime | None,
        start_to: datetime | None,
        after: tuple[datetime, str] | None,
        limit: int,
        status: str = "",
        workflow_id_prefix: str = "",
        task_list: str = "",
    ) -> list[RunRow]:
        """Runs newest start first. `status` (one exact status) wins over `open_only`."""
        q = select(runs).where(
            *run_filter(
                namespace, workflow_type, workflow_id_prefix, task_list, start_from, start_to
            )
        )
        if status:
            q = q.where(runs.c.status == status)
        elif open_only is True:
            q = q.where(runs.c.status == "open")
        elif open_only is False:
            q = q.where(runs.c.status != "open")
        if workflow_id:
            q = q.where(runs.c.workflow_id == workflow_id)
        if after is not None:
            # Keyset paging, newest first.
            at, rid = after
            q = q.where(
                (runs.c.start_time < at) | ((runs.c.start_time == at) & (runs.c.run_id < rid))
            )
        q = q.order_by(runs.c.start_time.desc(), runs.c.run_id.desc()).limit(limit)
        return [run_row(r) for r in await self._rows(q)]

    async def count_runs(
        self,
        namespace: str,
        *,
        workflow_type: str = "",
        workflow_id_prefix: str = "",
        task_list: str = "",
        start_from: datetime | None = None,
        start_to: datetime | None = None,
    ) -> dict[str, int]:
        """How many runs have each status (statuses with none are absent)."""
        rows = await self._rows(
            select(runs.c.status, func.count().label("n"))
            .where(
                *run_filter(
                    namespace, workflow_type, workflow_id_prefix, task_list, start_from, start_to
                )
            )
            .group_by(runs.c.status)
        )
        return {r.status: int(r.n) for r in rows}

    async def list_locks(self, namespace: str, lock_name: str = "") -> list[LockView]:
        """Each lock of the namespace with a holder or a waiter, by name.

        One statement, so one snapshot: a grant is never seen half done."""
        cols = ("lock_name", "run_id", "workflow_id", "requested_id", "since")
        held = select(*(locks.c[n] for n in cols), literal(0).label("place")).where(
            locks.c.namespace == namespace
        )
        queued = select(*(lock_waiters.c[n] for n in cols), lock_waiters.c.id.label("place")).where(
            lock_waiters.c.namespace == namespace
        )
        if lock_name:
            held = held.where(locks.c.lock_name == lock_name)
            queued = queued.where(lock_waiters.c.lock_name == lock_name)
        both = union_all(held, queued).subquery()
        views: dict[str, LockView] = {}
        for r in await self._rows(select(both).order_by(both.c.lock_name, both.c.place)):
            view = views.setdefault(r.lock_name, LockView(r.lock_name))
            entry = LockEntry(r.workflow_id, r.run_id, r.requested_id, aware(r.since))
            if r.place == 0:
                view.holder = entry
            else:
                view.waiters.append(entry)
        return list(views.values())

    async def namespace(self, name: str) -> dict[str, Any] | None:
        """A registered namespace's row, or None."""
        row = await self._first(select(namespaces).where(namespaces.c.name == name))
        return dict(row._mapping) if row is not None else None

    async def deadlines_due_and_next(
        self, now: datetime, limit: int, after: DueDeadline | None = None
    ) -> list[DueDeadline]:
        """The deadlines due by `now` (after `after`, in the order of
        `DueDeadline.key`; up to `limit` + 1: more than `limit` means there may
        be more), then the first not yet due, if any: one read tells the scanner
        what to fire and when to look next."""
        at, d = now.replace(tzinfo=None), deadlines.c
        # Strings compared as Python compares them (by code point), whatever
        # the database's collation: `DueDeadline.key` orders the rows read.
        run_id, kind = (
            (d.run_id.collate("C"), d.kind.collate("C")) if self.is_pg else (d.run_id, d.kind)
        )
        due_now = select(deadlines).where(d.due <= at)
        if after is not None:
            # (`due >=` too: it bounds the scan of the due index, which the
            # comparison of the whole key alone may not do.)
            since = after.due.replace(tzinfo=None)
            due_now = due_now.where(
                d.due >= since,
                tuple_(d.due, run_id, kind, d.ref_id)
                > tuple_(since, after.run_id, after.kind, after.ref_id),
            )
        # Two ordered scans of the due index that each stop early (an OR of the
        # two would read every overdue row, after an outage too, to sort them).
        parts = (
            due_now.order_by(d.due, run_id, kind, d.ref_id).limit(limit + 1),
            select(deadlines).where(d.due > at).order_by(d.due).limit(1),
        )
        rows = await self._rows(union_all(*(select(p.subquery()) for p in parts)))
        found = [DueDeadline(r.run_id, r.kind, r.ref_id, aware(r.due)) for r in rows]
        return sorted(found, key=DueDeadline.key)

    async def backlog(self, namespace: str, kind: str, task_list: str) -> int:
        row = await self._first(
            select(func.count().label("n")).where(
                tasks.c.namespace == namespace,
                tasks.c.kind == kind,
                tasks.c.task_list == task_list,
            )
        )
        return int(row.n) if row is not None else 0

    async def task_list_backlogs(
        self, namespace: str, limit: int
    ) -> list[tuple[str, str, int, datetime]]:
        """(kind, task list, tasks waiting, the oldest one's creation) for each
        task list of the namespace with a task waiting, by name; at most `limit`."""
        t = tasks.c
        rows = await self._rows(
            select(t.kind, t.task_list, func.count().label("n"), func.min(t.created_at).label("at"))
            .where(t.namespace == namespace)
            .group_by(t.kind, t.task_list)
            .order_by(t.task_list, t.kind)
            .limit(limit)
        )
        return [(r.kind, r.task_list, int(r.n), aware(r.at)) for r in rows]

    # -- pollers and registrations (their writes: upkeep_writes.py) ------------------

    async def recent_pollers(
        self, key: TaskListKey, since: timedelta
    ) -> list[tuple[str, datetime]]:
        cutoff = naive((utcnow() - since).timestamp())
        rows = await self._rows(
            select(pollers.c.identity, pollers.c.last_seen)
            .where(
                pollers.c.namespace == key.namespace,
                pollers.c.kind == key.kind,
                pollers.c.task_list == key.task_list,
                pollers.c.last_seen >= cutoff,
            )
            .order_by(pollers.c.last_seen.desc())
        )
        return [(r.identity, aware(r.last_seen)) for r in rows]

    async def namespace_pollers(
        self, namespace: str, since: timedelta, limit: int
    ) -> list[tuple[TaskListKey, str, datetime]]:
        """(task list, identity, last seen) of every poller of the namespace seen
        within `since`; at most `limit`, the latest first."""
        cutoff = naive((utcnow() - since).timestamp())
        p = pollers.c
        rows = await self._rows(
            select(p.kind, p.task_list, p.identity, p.last_seen)
            .where(p.namespace == namespace, p.last_seen >= cutoff)
            .order_by(p.last_seen.desc())
            .limit(limit)
        )
        return [
            (TaskListKey(namespace, r.kind, r.task_list), r.identity, aware(r.last_seen))
            for r in rows
        ]

    async def registered_workflow_types(
        self, namespace: str, names: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], RegisteredWorkflowType]:
        """The registrations of those (name, version) pairs that are registered."""
        found = await self._registered("workflow", namespace, names)
        return {k: v for k, v in found.items() if isinstance(v, RegisteredWorkflowType)}

    async def registered_activity_types(
        self, namespace: str, names: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], RegisteredActivityType]:
        """The registrations of those (name, version) pairs that are registered."""
        found = await self._registered("activity", namespace, names)
        return {k: v for k, v in found.items() if isinstance(v, RegisteredActivityType)}

    async def _registered(
        self, kind: str, namespace: str, names: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], Registered]:
        """From this node's memory when it holds them (`registrations.py`), else
        read, converted once, and remembered (a type not registered too)."""
        wanted = set(names)
        found: dict[tuple[str, str], Registered] = {}
        missing: set[tuple[str, str]] = set()
        for name, version in wanted:
            known, held = self.types.get((kind, namespace, name, version))
            if not known:
                missing.add((name, version))
            elif held is not None:
                found[(name, version)] = held
        if not missing:
            return found
        table = workflow_types if kind == "workflow" else activity_types
        convert = workflow_type_of if kind == "workflow" else activity_type_of
        rows = await self._rows(
            select(table).where(
                table.c.namespace == namespace, table.c.name.in_({n for n, _ in missing})
            )
        )
        read: dict[tuple[str, str], Registered] = {(r.name, r.version): convert(r) for r in rows}
        for pair in missing:
            registered = read.get(pair)
            self.types.put((kind, namespace, *pair), registered)
            if registered is not None:
                found[pair] = registered
        return found


def run_filter(
    namespace: str,
    workflow_type: str,
    workflow_id_prefix: str,
    task_list: str,
    start_from: datetime | None,
    start_to: datetime | None,
) -> list[Any]:
    """The conditions listing and counting runs share."""
    where: list[Any] = [runs.c.namespace == namespace]
    if workflow_type:
        where.append(runs.c.workflow_type == workflow_type)
    if workflow_id_prefix:
        # Not LIKE: SQLite's LIKE ignores case, and `%`/`_` in ids would match anything.
        where.append(
            func.substr(runs.c.workflow_id, 1, len(workflow_id_prefix)) == workflow_id_prefix
        )
    if task_list:
        where.append(runs.c.task_list == task_list)
    if start_from is not None:
        where.append(runs.c.start_time >= start_from.replace(tzinfo=None))
    if start_to is not None:
        where.append(runs.c.start_time < start_to.replace(tzinfo=None))
    return where

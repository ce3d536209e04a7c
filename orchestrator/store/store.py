"""The store: every write to a run goes through `transact` (or `create` for a
new run, `claim` for a poll), one short transaction each:

    lock the run row -> load state -> engine -> append events, write state,
    sync task and deadline rows -> commit -> tell the dispatcher

Only this package imports SQLAlchemy; database errors become domain errors here.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import structlog
from sqlalchemy import and_, delete, func, insert, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from orchestrator.engine import derived
from orchestrator.engine.errors import AlreadyExists, NotFound, Unavailable
from orchestrator.engine.state import RunKey, RunState
from orchestrator.engine.transition import Transition
from sdk.api.weft.v1 import history_pb2 as h

from . import dialect, migrate
from .schema import (
    activity_types,
    deadlines,
    history_events,
    pollers,
    request_ids,
    runs,
    server_meta,
    tasks,
    workflow_types,
)

T = TypeVar("T")
log = structlog.get_logger("weft.store")

NOTIFY_CHANNEL = "weft_tasks"
_RETRIES = 8


def utcnow() -> datetime:
    return datetime.now(UTC)


def _naive(epoch: float) -> datetime:
    """Times are stored as naive UTC: the same on both dialects."""
    return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class TaskListKey:
    namespace: str
    kind: str
    task_list: str

    def channel_payload(self) -> str:
        return f"{self.kind}|{self.namespace}|{self.task_list}"

    @classmethod
    def from_payload(cls, payload: str) -> TaskListKey:
        kind, namespace, task_list = payload.split("|", 2)
        return cls(namespace, kind, task_list)


@dataclass
class Committed:
    """What a commit changed that waiting pollers, followers and the timer scanner care about."""

    task_lists: set[TaskListKey] = field(default_factory=set)
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


@dataclass(frozen=True)
class DueDeadline:
    run_id: str
    kind: str
    ref_id: int
    due: datetime


class Store:
    def __init__(self, engine: AsyncEngine, on_commit: Callable[[Committed], None]) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{dialect.WRITE: True})
        self.is_pg = engine.dialect.name == "postgresql"
        self._on_commit = on_commit

    @classmethod
    async def open(cls, url: str, on_commit: Callable[[Committed], None] = lambda c: None) -> Store:
        dialect.async_url(url)  # refuse an unsupported URL before touching anything
        await asyncio.to_thread(migrate.upgrade, url)
        return cls(dialect.create_engine(url), on_commit)

    async def close(self) -> None:
        await self._engine.dispose()

    # -- transactions ---------------------------------------------------------

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        async with self._writer.begin() as conn:
            yield conn

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        try:
            async with self._engine.connect() as conn:
                yield conn
        except DBAPIError as exc:
            raise Unavailable(f"database unavailable: {exc.orig or exc}") from exc

    async def _retrying(self, attempt: Callable[[], Any]) -> Any:
        """Run a whole transaction again when the database says it may succeed now."""
        delay = 0.02
        for n in range(_RETRIES):
            try:
                return await attempt()
            except DBAPIError as exc:
                if not dialect.is_retryable(exc) or n == _RETRIES - 1:
                    if isinstance(exc, IntegrityError):
                        raise
                    raise Unavailable(f"database unavailable: {exc.orig or exc}") from exc
                log.warning("db.retry", error=str(exc.orig or exc)[:200], attempt=n + 1)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    async def transact(self, run_id: str, fn: Callable[[Transition], T]) -> T:
        """Apply one engine command to an existing run, atomically."""

        async def attempt() -> T:
            committed = Committed()
            async with self._write() as conn:
                state = await self._lock_run(conn, run_id)
                result = await self._apply(conn, state, fn, committed, is_new=False)
            self._on_commit(committed)
            return result

        result: T = await self._retrying(attempt)
        return result

    async def create(
        self,
        namespace: str,
        workflow_id: str,
        new_run_id: str,
        request_id: str,
        fn: Callable[[Transition], T],
        on_open: Callable[[Transition], T] | None = None,
    ) -> tuple[str, T | None, bool]:
        """Open a new run of `workflow_id`, or (with `on_open`) apply that to the open run.

        A repeated `request_id` answers with the run it started and changes
        nothing. Returns (run id, result, whether a run was started).
        """

        async def attempt() -> tuple[str, T | None, bool]:
            committed = Committed()
            async with self._write() as conn:
                if request_id:
                    prior = await conn.scalar(
                        select(request_ids.c.run_id).where(
                            request_ids.c.namespace == namespace,
                            request_ids.c.workflow_id == workflow_id,
                            request_ids.c.kind == "start",
                            request_ids.c.request_id == request_id,
                        )
                    )
                    if prior is not None:
                        return prior, None, False
                open_id = await conn.scalar(
                    dialect.for_update(
                        select(runs.c.run_id).where(
                            runs.c.namespace == namespace,
                            runs.c.workflow_id == workflow_id,
                            runs.c.status == "open",
                        ),
                        self.is_pg,
                    )
                )
                if open_id is not None:
                    if on_open is None:
                        raise AlreadyExists(
                            f"workflow {workflow_id!r} is already running (run {open_id})"
                        )
                    state = await self._lock_run(conn, open_id)
                    result = await self._apply(conn, state, on_open, committed, is_new=False)
                    started = False
                    run_id = open_id
                else:
                    state = RunState.blank(RunKey(namespace, workflow_id, new_run_id))
                    result = await self._apply(conn, state, fn, committed, is_new=True)
                    started, run_id = True, new_run_id
                    if request_id:
                        await conn.execute(
                            insert(request_ids).values(
                                namespace=namespace,
                                workflow_id=workflow_id,
                                kind="start",
                                request_id=request_id,
                                run_id=run_id,
                                created_at=_naive(utcnow().timestamp()),
                            )
                        )
            self._on_commit(committed)
            return run_id, result, started

        for n in range(2):
            try:
                out: tuple[str, T | None, bool] = await self._retrying(attempt)
                return out
            except IntegrityError as exc:
                # Another node opened a run of this workflow id between our read
                # and our insert; the next attempt sees it and answers for it.
                if n == 1:
                    raise AlreadyExists(f"workflow {workflow_id!r} is already running") from exc
        raise AssertionError("unreachable")

    async def dedupe(self, namespace: str, workflow_id: str, kind: str, request_id: str) -> bool:
        """True if a request with this id was already applied (signal, cancel)."""
        if not request_id:
            return False
        async with self._read() as conn:
            found = await conn.scalar(
                select(request_ids.c.run_id).where(
                    request_ids.c.namespace == namespace,
                    request_ids.c.workflow_id == workflow_id,
                    request_ids.c.kind == kind,
                    request_ids.c.request_id == request_id,
                )
            )
        return found is not None

    async def transact_once(
        self, run_id: str, kind: str, request_id: str, fn: Callable[[Transition], T]
    ) -> T | None:
        """`transact`, recording `request_id` in the same transaction so a retry appends nothing."""
        if not request_id:
            return await self.transact(run_id, fn)

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
                        created_at=_naive(utcnow().timestamp()),
                    )
                )
            self._on_commit(committed)
            return result

        out: T | None = await self._retrying(attempt)
        return out

    async def claim(
        self, namespace: str, kind: str, task_list: str, fn: Callable[[Transition, int], T]
    ) -> T | None:
        """Hand the oldest task of a task list to one poller, appending its *Started event.

        None if there is no task. On PostgreSQL `SKIP LOCKED` lets concurrent
        pollers take different tasks instead of queueing on the first.
        """
        where = and_(
            tasks.c.namespace == namespace, tasks.c.kind == kind, tasks.c.task_list == task_list
        )
        async with self._read() as conn:
            if await conn.scalar(select(tasks.c.id).where(where).limit(1)) is None:
                return None

        async def attempt() -> T | None:
            committed = Committed()
            async with self._write() as conn:
                row = (
                    await conn.execute(
                        dialect.for_update(
                            select(tasks.c.id, tasks.c.run_id, tasks.c.scheduled_id)
                            .where(where)
                            .order_by(tasks.c.id)
                            .limit(1),
                            self.is_pg,
                            skip_locked=True,
                        )
                    )
                ).first()
                if row is None:
                    return None
                state = await self._lock_run(conn, row.run_id)
                result = await self._apply(
                    conn, state, lambda t: fn(t, row.scheduled_id), committed, is_new=False
                )
            self._on_commit(committed)
            return result

        out: T | None = await self._retrying(attempt)
        return out

    async def _lock_run(self, conn: AsyncConnection, run_id: str) -> RunState:
        raw = await conn.scalar(
            dialect.for_update(select(runs.c.state).where(runs.c.run_id == run_id), self.is_pg)
        )
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
        t = Transition(state, utcnow())
        result = fn(t)
        t.finish()
        if t.events or t.state_changed or is_new:
            await self._persist(conn, t, before_tasks, before_deadlines, is_new, committed)
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
                [
                    {
                        "run_id": s.run_id,
                        "event_id": e.event_id,
                        "event_type": e.type,
                        "timestamp": e.timestamp.ToDatetime(),
                        "data": e.SerializeToString(),
                    }
                    for e in t.events
                ],
            )
            committed.runs_with_events.add(s.run_id)
            committed.events += len(t.events)
        row = {
            "status": s.status,
            "close_time": _naive(s.closed_at) if s.closed_at else None,
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
                    start_time=_naive(s.started_at),
                    continued_from_run_id=s.continued_from_run_id,
                    **row,
                )
            )
        else:
            await conn.execute(update(runs).where(runs.c.run_id == s.run_id).values(**row))
        await self._sync_tasks(conn, s, before_tasks, committed)
        await self._sync_deadlines(conn, s, before_deadlines, committed)
        for successor in t.new_runs:
            await self._persist(conn, successor, set(), {}, True, committed)

    async def _sync_tasks(
        self, conn: AsyncConnection, s: RunState, before: set[derived.TaskRef], c: Committed
    ) -> None:
        after = derived.tasks(s)
        for ref in before - after:
            await conn.execute(
                delete(tasks).where(
                    tasks.c.run_id == s.run_id,
                    tasks.c.kind == ref.kind,
                    tasks.c.scheduled_id == ref.scheduled_id,
                )
            )
        added = after - before
        if not added:
            return
        now = _naive(utcnow().timestamp())
        await conn.execute(
            insert(tasks),
            [
                {
                    "namespace": s.namespace,
                    "kind": r.kind,
                    "task_list": r.task_list,
                    "run_id": s.run_id,
                    "scheduled_id": r.scheduled_id,
                    "created_at": now,
                }
                for r in sorted(added, key=lambda r: r.scheduled_id)
            ],
        )
        keys = {TaskListKey(s.namespace, r.kind, r.task_list) for r in added}
        c.task_lists |= keys
        if self.is_pg:
            # Transactional: delivered on commit only, so a poller woken on
            # another node always finds the row.
            for key in keys:
                await conn.execute(
                    text("SELECT pg_notify(:ch, :payload)"),
                    {"ch": NOTIFY_CHANNEL, "payload": key.channel_payload()},
                )

    async def _sync_deadlines(
        self,
        conn: AsyncConnection,
        s: RunState,
        before: dict[tuple[str, int], float],
        c: Committed,
    ) -> None:
        after = derived.deadlines(s)
        for key, due in before.items():
            if after.get(key) != due:
                await conn.execute(
                    delete(deadlines).where(
                        deadlines.c.run_id == s.run_id,
                        deadlines.c.kind == key[0],
                        deadlines.c.ref_id == key[1],
                    )
                )
        added = [(k, due) for k, due in after.items() if before.get(k) != due]
        if added:
            await conn.execute(
                insert(deadlines),
                [
                    {"run_id": s.run_id, "kind": k[0], "ref_id": k[1], "due": _naive(due)}
                    for k, due in added
                ],
            )
            earliest = min(due for _, due in added)
            if c.earliest_deadline is None or earliest < c.earliest_deadline:
                c.earliest_deadline = earliest

    # -- reads ------------------------------------------------------------------

    async def find_run(self, namespace: str, workflow_id: str, run_id: str = "") -> RunRow:
        """The named run; without a run id, the open run, else the latest one."""
        query = select(runs).where(runs.c.namespace == namespace, runs.c.workflow_id == workflow_id)
        if run_id:
            query = query.where(runs.c.run_id == run_id)
        else:
            # Open first, then the most recent start.
            query = query.order_by((runs.c.status == "open").desc(), runs.c.start_time.desc())
        async with self._read() as conn:
            row = (await conn.execute(query.limit(1))).first()
        if row is None:
            what = f"run {run_id} of workflow" if run_id else "workflow"
            raise NotFound(f"{what} {workflow_id!r} not found in namespace {namespace!r}")
        return _run_row(row)

    async def load_state(self, run_id: str) -> RunState:
        async with self._read() as conn:
            raw = await conn.scalar(select(runs.c.state).where(runs.c.run_id == run_id))
        if raw is None:
            raise NotFound(f"run {run_id} not found")
        return RunState.from_json(raw)

    async def read_history(
        self, run_id: str, first_id: int, last_id: int | None, limit: int
    ) -> list[h.HistoryEvent]:
        query = select(history_events.c.data).where(
            history_events.c.run_id == run_id, history_events.c.event_id >= first_id
        )
        if last_id is not None:
            query = query.where(history_events.c.event_id <= last_id)
        async with self._read() as conn:
            rows = await conn.execute(query.order_by(history_events.c.event_id).limit(limit))
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
    ) -> list[RunRow]:
        q = select(runs).where(runs.c.namespace == namespace)
        if open_only is True:
            q = q.where(runs.c.status == "open")
        elif open_only is False:
            q = q.where(runs.c.status != "open")
        if workflow_type:
            q = q.where(runs.c.workflow_type == workflow_type)
        if workflow_id:
            q = q.where(runs.c.workflow_id == workflow_id)
        if start_from is not None:
            q = q.where(runs.c.start_time >= start_from.replace(tzinfo=None))
        if start_to is not None:
            q = q.where(runs.c.start_time < start_to.replace(tzinfo=None))
        if after is not None:
            # Keyset paging, newest first.
            at, rid = after
            q = q.where(
                (runs.c.start_time < at) | ((runs.c.start_time == at) & (runs.c.run_id < rid))
            )
        q = q.order_by(runs.c.start_time.desc(), runs.c.run_id.desc()).limit(limit)
        async with self._read() as conn:
            return [_run_row(r) for r in await conn.execute(q)]

    async def due_deadlines(self, now: datetime, limit: int) -> list[DueDeadline]:
        async with self._read() as conn:
            rows = await conn.execute(
                select(deadlines)
                .where(deadlines.c.due <= now.replace(tzinfo=None))
                .order_by(deadlines.c.due)
                .limit(limit)
            )
            return [DueDeadline(r.run_id, r.kind, r.ref_id, _aware(r.due)) for r in rows]

    async def next_deadline(self) -> datetime | None:
        async with self._read() as conn:
            due = await conn.scalar(select(func.min(deadlines.c.due)))
        return _aware(due) if due is not None else None

    async def backlog(self, namespace: str, kind: str, task_list: str) -> int:
        async with self._read() as conn:
            n = await conn.scalar(
                select(func.count()).where(
                    tasks.c.namespace == namespace,
                    tasks.c.kind == kind,
                    tasks.c.task_list == task_list,
                )
            )
        return int(n or 0)

    # -- pollers and registrations -------------------------------------------------

    async def record_poller(self, key: TaskListKey, identity: str) -> None:
        values = {
            "namespace": key.namespace,
            "kind": key.kind,
            "task_list": key.task_list,
            "identity": identity,
            "last_seen": _naive(utcnow().timestamp()),
        }
        stmt = dialect.upsert(
            self.is_pg, pollers, values, ["namespace", "kind", "task_list", "identity"]
        )
        await self._retrying(lambda: self._execute(stmt))

    async def _execute(self, stmt: Any) -> None:
        async with self._write() as conn:
            await conn.execute(stmt)

    async def recent_pollers(
        self, key: TaskListKey, since: timedelta
    ) -> list[tuple[str, datetime]]:
        cutoff = _naive((utcnow() - since).timestamp())
        async with self._read() as conn:
            rows = await conn.execute(
                select(pollers.c.identity, pollers.c.last_seen)
                .where(
                    pollers.c.namespace == key.namespace,
                    pollers.c.kind == key.kind,
                    pollers.c.task_list == key.task_list,
                    pollers.c.last_seen >= cutoff,
                )
                .order_by(pollers.c.last_seen.desc())
            )
            return [(r.identity, _aware(r.last_seen)) for r in rows]

    async def register_type(
        self, kind: str, namespace: str, name: str, version: str, values: dict[str, Any]
    ) -> None:
        table = workflow_types if kind == "workflow" else activity_types
        row = {
            "namespace": namespace,
            "name": name,
            "version": version,
            "registered_at": _naive(utcnow().timestamp()),
            **values,
        }
        stmt = dialect.upsert(self.is_pg, table, row, ["namespace", "name", "version"])
        await self._retrying(lambda: self._execute(stmt))

    async def registered_types(
        self, kind: str, namespace: str, names: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], dict[str, Any]]:
        wanted = set(names)
        if not wanted:
            return {}
        table = workflow_types if kind == "workflow" else activity_types
        async with self._read() as conn:
            rows = await conn.execute(
                select(table).where(
                    table.c.namespace == namespace, table.c.name.in_({n for n, _ in wanted})
                )
            )
            return {
                (r.name, r.version): dict(r._mapping) for r in rows if (r.name, r.version) in wanted
            }

    async def token_secret(self) -> bytes:
        """The task-token signing key: made once, shared by all nodes, kept across restarts."""

        async def attempt() -> str:
            async with self._write() as conn:
                value = await conn.scalar(
                    select(server_meta.c.value).where(server_meta.c.key == "token_secret")
                )
                if value is None:
                    value = secrets.token_hex(32)
                    await conn.execute(insert(server_meta).values(key="token_secret", value=value))
                return str(value)

        for n in range(2):
            try:
                return bytes.fromhex(await self._retrying(attempt))
            except IntegrityError:
                if n == 1:
                    raise
        raise AssertionError("unreachable")


def _run_row(r: Any) -> RunRow:
    return RunRow(
        key=RunKey(r.namespace, r.workflow_id, r.run_id),
        workflow_type=r.workflow_type,
        task_list=r.task_list,
        status=r.status,
        start_time=_aware(r.start_time),
        close_time=_aware(r.close_time) if r.close_time else None,
        history_length=r.history_length,
        continued_from_run_id=r.continued_from_run_id,
    )

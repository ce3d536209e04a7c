"""The store's connections, retry policy and read-only queries (no run is
changed here; see `store.py` for the write path)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

import structlog
from sqlalchemy import func, insert, select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from orchestrator.engine.errors import NotFound, Unavailable
from orchestrator.engine.state import RunState
from sdk.api.weft.v1 import history_pb2 as h

from . import dialect
from .rows import Committed, DueDeadline, RunRow, TaskListKey, aware, naive, run_row, utcnow
from .schema import (
    activity_types,
    deadlines,
    history_events,
    pollers,
    runs,
    server_meta,
    tasks,
    workflow_types,
)

T = TypeVar("T")
log = structlog.get_logger("weft.store")
_RETRIES = 8


class StoreBase:
    def __init__(self, engine: AsyncEngine, on_commit: Callable[[Committed], None]) -> None:
        self._engine = engine
        self._writer = engine.execution_options(**{dialect.WRITE: True})
        self.is_pg = engine.dialect.name == "postgresql"
        self._on_commit = on_commit

    async def close(self) -> None:
        await self._engine.dispose()

    # -- connections and retries -------------------------------------------------

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
        return run_row(row)

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
            return [run_row(r) for r in await conn.execute(q)]

    async def due_deadlines(self, now: datetime, limit: int) -> list[DueDeadline]:
        async with self._read() as conn:
            rows = await conn.execute(
                select(deadlines)
                .where(deadlines.c.due <= now.replace(tzinfo=None))
                .order_by(deadlines.c.due)
                .limit(limit)
            )
            return [DueDeadline(r.run_id, r.kind, r.ref_id, aware(r.due)) for r in rows]

    async def next_deadline(self) -> datetime | None:
        async with self._read() as conn:
            due = await conn.scalar(select(func.min(deadlines.c.due)))
        return aware(due) if due is not None else None

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
            "last_seen": naive(utcnow().timestamp()),
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
        cutoff = naive((utcnow() - since).timestamp())
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
            return [(r.identity, aware(r.last_seen)) for r in rows]

    async def register_type(
        self, kind: str, namespace: str, name: str, version: str, values: dict[str, Any]
    ) -> None:
        table = workflow_types if kind == "workflow" else activity_types
        row = {
            "namespace": namespace,
            "name": name,
            "version": version,
            "registered_at": naive(utcnow().timestamp()),
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

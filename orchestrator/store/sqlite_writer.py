"""The SQLite hot path: the same writes as `pg_writer`, as SQLAlchemy Core
statements in one write transaction (SQLite has one writer at a time, and no
round trips to save), with the same compare-and-set on the run's version."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from .reads import StoreBase
from .rows import event_rows, naive
from .schema import deadlines, history_events, request_ids, runs, tasks
from .writes import Candidate, Conflict, RunWrite

_LOAD = select(runs.c.state, runs.c.version).where(runs.c.run_id == bindparam("run_id"))
_SET = (
    update(runs)
    .where(runs.c.run_id == bindparam("key_run_id"), runs.c.version == bindparam("key_version"))
    .values(version=runs.c.version + 1)
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
_CANDIDATES = (
    select(tasks.c.id, tasks.c.run_id, tasks.c.scheduled_id, runs.c.version)
    .join_from(tasks, runs, runs.c.run_id == tasks.c.run_id)
    .where(
        tasks.c.namespace == bindparam("namespace"),
        tasks.c.kind == bindparam("kind"),
        tasks.c.task_list == bindparam("task_list"),
    )
    .order_by(tasks.c.id)
    .limit(bindparam("limit"))
)
_EVENTS = (
    select(history_events.c.data)
    .where(
        history_events.c.run_id == bindparam("run_id"),
        history_events.c.event_id >= bindparam("first_id"),
        history_events.c.event_id <= bindparam("last_id"),
    )
    .order_by(history_events.c.event_id)
)


class SqliteWriter:
    def __init__(self, store: StoreBase) -> None:
        self._store = store

    async def close(self) -> None:
        pass  # the store's engine owns the connections

    async def load(self, run_id: str) -> tuple[str, int] | None:
        rows = await self._store._rows(_LOAD.params(run_id=run_id))
        return (rows[0].state, int(rows[0].version)) if rows else None

    async def candidates(
        self, namespace: str, kind: str, task_list: str, limit: int
    ) -> list[Candidate]:
        query = _CANDIDATES.params(namespace=namespace, kind=kind, task_list=task_list, limit=limit)
        return [
            Candidate(int(r.id), r.run_id, int(r.scheduled_id), int(r.version))
            for r in await self._store._rows(query)
        ]

    async def events(self, run_id: str, first_id: int, last_id: int) -> list[bytes]:
        query = _EVENTS.params(run_id=run_id, first_id=first_id, last_id=last_id)
        return [bytes(r.data) for r in await self._store._rows(query)]

    async def write(self, w: RunWrite, links: tuple[str, str, str] = ("", "", "")) -> bool:
        async def attempt() -> bool:
            async with self._store._write() as conn:
                return await _write(conn, w, links)

        try:
            ok: bool = await self._store._retrying(attempt, unique_ok=True)
        except IntegrityError as exc:
            # Only the keys that mean "taken" (as CONFLICT_KEYS on PostgreSQL);
            # SQLite names the columns, not the index.
            if not str(exc.orig).startswith(_CONFLICT_MESSAGES):
                raise
            raise Conflict(str(exc.orig)) from exc
        return ok


_CONFLICT_MESSAGES = (
    "UNIQUE constraint failed: runs.namespace, runs.workflow_id",
    "UNIQUE constraint failed: request_ids.",
)


async def _write(conn: Any, w: RunWrite, links: tuple[str, str, str]) -> bool:
    s = w.state
    row = w.row()
    if w.is_new:
        await conn.execute(
            insert(runs).values(
                run_id=s.run_id,
                namespace=s.namespace,
                workflow_id=s.workflow_id,
                workflow_type=s.type_name,
                task_list=s.task_list,
                start_time=naive(s.started_at),
                continued_from_run_id=links[0],
                parent_run_id=links[1],
                replay_of_run_id=links[2],
                version=1,
                **row,
            )
        )
    else:
        done = await conn.execute(_SET, {"key_run_id": s.run_id, "key_version": w.version, **row})
        if done.rowcount != 1:
            return False  # nothing written yet: the transaction ends empty
    if w.events:
        await conn.execute(
            insert(history_events),
            event_rows(s.run_id, w.events),
        )
    if w.tasks_gone:
        await conn.execute(
            _DELETE_TASK,
            [{"run_id": s.run_id, "kind": k, "scheduled_id": sid} for k, sid in w.tasks_gone],
        )
    now = naive(w.now.timestamp())
    if w.tasks_added:
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
                for r in w.tasks_added
            ],
        )
    if w.deadlines_gone:
        await conn.execute(
            _DELETE_DEADLINE,
            [{"run_id": s.run_id, "kind": k, "ref_id": ref} for k, ref in w.deadlines_gone],
        )
    if w.deadlines_added:
        await conn.execute(
            insert(deadlines),
            [
                {"run_id": s.run_id, "kind": k, "ref_id": ref, "due": due}
                for k, ref, due in w.deadlines_added
            ],
        )
    if w.request:
        namespace, workflow_id, kind, request_id = w.request
        await conn.execute(
            insert(request_ids).values(
                namespace=namespace,
                workflow_id=workflow_id,
                kind=kind,
                request_id=request_id,
                run_id=s.run_id,
                created_at=now,
            )
        )
    return True

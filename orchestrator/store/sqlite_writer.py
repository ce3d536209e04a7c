"""The SQLite hot path: the same writes as `pg_writer`, with the same
compare-and-set on the run's version, on connections of its own, each in a
thread of its own.

A write is one call into its thread: BEGIN IMMEDIATE, its statements and
COMMIT. Through SQLAlchemy and aiosqlite each statement was a hop of its own
between the event loop and a driver thread, about 0.35 ms of CPU, where the
statement itself costs SQLite about 0.01 ms (a micro-benchmark on this
machine); a write is two to seven statements between BEGIN and COMMIT. SQLite
has one writer at a time, so one connection for writes loses nothing. The hot
path's reads (a run's state on a cache miss, task candidates, events) have a
second connection, one call each.

Values are converted as SQLAlchemy binds them on SQLite (a DateTime as text
with microseconds), so the rows are the ones the rest of the store reads and
writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Table
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, IntegrityError

from orchestrator.engine.errors import Unavailable

from . import dialect
from .pending import Pending, drive
from .reads import StoreBase
from .rows import event_rows, naive, task_rows
from .schema import deadlines, history_events, request_ids, runs, tasks
from .writes import Candidate, Conflict, RunColumns, RunWrite

T = TypeVar("T")
Step = tuple[str, Sequence[Any], bool]
"""(SQL, its parameters, whether they are a list of rows for executemany)."""

_LOAD = "SELECT state, version FROM runs WHERE run_id = ?"
_VERSION = "SELECT version FROM runs WHERE run_id = ?"
_CANDIDATES = (
    "SELECT t.id, t.run_id, t.scheduled_id, r.version FROM tasks AS t"
    " JOIN runs AS r ON r.run_id = t.run_id"
    " WHERE t.namespace = ? AND t.kind = ? AND t.task_list = ? ORDER BY t.id LIMIT ?"
)
_EVENTS = (
    "SELECT data FROM history_events WHERE run_id = ? AND event_id >= ? AND event_id <= ?"
    " ORDER BY event_id"
)
_DELETE_TASK = "DELETE FROM tasks WHERE run_id = ? AND kind = ? AND scheduled_id = ?"
_DELETE_DEADLINE = "DELETE FROM deadlines WHERE run_id = ? AND kind = ? AND ref_id = ?"
_RUN_COLUMNS = tuple(RunColumns.__annotations__)  # what a write sets of the run row
_CONFLICT_MESSAGES = (
    "UNIQUE constraint failed: runs.namespace, runs.workflow_id",
    "UNIQUE constraint failed: request_ids.",
)


class _Rows:
    """`names` of `table` as SQL, and as parameters converted the way SQLAlchemy
    binds each column on this dialect, worked out once."""

    def __init__(self, table: Table, names: Sequence[str], sql_dialect: Dialect) -> None:
        self.names = tuple(names)
        self.insert = (
            f"INSERT INTO {table.name} ({', '.join(names)})"
            f" VALUES ({', '.join('?' for _ in names)})"
        )
        # The dialect's own type (SQLite's DATETIME, not the generic DateTime,
        # which binds nothing and would leave a datetime to sqlite3's adapter).
        self._bind = tuple(
            sql_dialect.type_descriptor(table.c[n].type).bind_processor(sql_dialect) for n in names
        )

    def params(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(
            values[n] if bind is None else bind(values[n])
            for n, bind in zip(self.names, self._bind, strict=True)
        )


class _Connection:
    """One sqlite3 connection, opened, used and closed in a thread of its own."""

    def __init__(self, path: str, name: str) -> None:
        self._path = path
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._db: sqlite3.Connection | None = None
        """Touched in the thread only."""
        self._closed = False

    async def call(self, work: Callable[[sqlite3.Connection], T], sql: str | None) -> T:
        """`work(connection)` in the thread. A cancelled caller does not stop
        it: the store waits for a write's outcome (`_retrying`,
        `Pending.seen`). SQLite's errors come back as SQLAlchemy's (with `sql`
        in the message), which the store's retries and translation read."""
        if self._closed:
            raise Unavailable("the database is closed")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._thread, self._run, work)
        except sqlite3.Error as exc:
            raise DBAPIError.instance(sql, None, exc, sqlite3.Error) from exc
        except _StepFailed as exc:
            orig = exc.__cause__
            assert isinstance(orig, sqlite3.Error)
            raise DBAPIError.instance(exc.sql, None, orig, sqlite3.Error) from orig
        except _CommitFailed as exc:
            raise Unavailable(
                f"database commit failed; the outcome is unknown: {exc.__cause__}"
            ) from exc

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._db is None:
            db = sqlite3.connect(self._path, isolation_level=None)
            dialect.configure_sqlite(db)
            self._db = db
        return work(self._db)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True  # (work accepted before this runs first: the thread keeps order)
        await asyncio.get_running_loop().run_in_executor(self._thread, self._close)
        self._thread.shutdown(wait=False)  # (nothing is left for it: the thread ends)

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class SqliteWriter:
    def __init__(self, store: StoreBase, path: str) -> None:
        self._store = store
        # Reads have a connection of their own: a write may wait (busy_timeout)
        # for another of the store's connections to commit, and polls and
        # history reads need not wait with it.
        self._writes = _Connection(path, "weft-sqlite-write")
        self._reads = _Connection(path, "weft-sqlite-read")
        sql_dialect = store._engine.dialect
        self._runs = _Rows(
            runs,
            (
                "run_id",
                "namespace",
                "workflow_id",
                "workflow_type",
                "task_list",
                "start_time",
                "continued_from_run_id",
                "parent_run_id",
                "replay_of_run_id",
                "version",
                *_RUN_COLUMNS,
            ),
            sql_dialect,
        )
        self._run_update = _Rows(runs, _RUN_COLUMNS, sql_dialect)
        self._events = _Rows(
            history_events, ("run_id", "event_id", "event_type", "timestamp", "data"), sql_dialect
        )
        self._tasks = _Rows(
            tasks,
            ("namespace", "kind", "task_list", "run_id", "scheduled_id", "created_at"),
            sql_dialect,
        )
        self._deadlines = _Rows(deadlines, ("run_id", "kind", "ref_id", "due"), sql_dialect)
        self._requests = _Rows(
            request_ids,
            ("namespace", "workflow_id", "kind", "request_id", "run_id", "created_at"),
            sql_dialect,
        )
        self._set = (
            f"UPDATE runs SET version = version + 1,"
            f" {', '.join(f'{n} = ?' for n in _RUN_COLUMNS)} WHERE run_id = ? AND version = ?"
        )

    async def close(self) -> None:
        try:
            await self._writes.close()
        finally:
            await self._reads.close()

    # -- reads -------------------------------------------------------------------------

    async def load(self, run_id: str) -> tuple[str, int] | None:
        rows = await self._read(_LOAD, (run_id,))
        return (rows[0][0], int(rows[0][1])) if rows else None

    async def version(self, run_id: str) -> int | None:
        rows = await self._read(_VERSION, (run_id,))
        return int(rows[0][0]) if rows else None

    async def candidates(
        self, namespace: str, kind: str, task_list: str, limit: int
    ) -> list[Candidate]:
        rows = await self._read(_CANDIDATES, (namespace, kind, task_list, limit))
        return [Candidate(int(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]

    async def events(self, run_id: str, first_id: int, last_id: int) -> list[bytes]:
        rows = await self._read(_EVENTS, (run_id, first_id, last_id))
        return [bytes(r[0]) for r in rows]

    async def _read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        def read(db: sqlite3.Connection) -> list[Any]:
            return db.execute(sql, params).fetchall()

        async def attempt() -> list[Any]:
            self._store.stats.statements += 1  # (as `pg_writer` counts: sent, in autocommit)
            return await self._reads.call(read, sql)

        rows: list[Any] = await self._store._retrying(attempt)
        return rows

    # -- the write ---------------------------------------------------------------------

    def submit(self, w: RunWrite, links: tuple[str, str, str] = ("", "", "")) -> Pending[bool]:
        """Apply `w` (as `PgWriter.submit` does), in a task of its own."""
        return drive(self._write(w, links))

    async def _write(self, w: RunWrite, links: tuple[str, str, str]) -> bool:
        steps = self._steps(w, links)

        def transact(db: sqlite3.Connection) -> bool:
            return _transact(db, steps, compare_and_set=not w.is_new)

        async def attempt() -> bool:
            stats = self._store.stats
            stats.statements += 2  # BEGIN and the run row's (the rest once they are known sent)
            wrote = await self._writes.call(transact, None)
            if wrote:
                stats.statements += len(steps) - 1
                stats.transactions += 1
            return wrote

        try:
            ok: bool = await self._store._retrying(attempt, unique_ok=True, own_task=True)
        except IntegrityError as exc:
            # Only the keys that mean "taken" (as CONFLICT_KEYS on PostgreSQL);
            # SQLite names the columns, not the index.
            if not str(exc.orig).startswith(_CONFLICT_MESSAGES):
                raise
            raise Conflict(str(exc.orig)) from exc
        return ok

    def _steps(self, w: RunWrite, links: tuple[str, str, str]) -> list[Step]:
        """The write's statements, the run row's first."""
        s = w.state
        row = w.row()
        steps: list[Step] = []
        if w.is_new:
            new_run = {
                "run_id": s.run_id,
                "namespace": s.namespace,
                "workflow_id": s.workflow_id,
                "workflow_type": s.type_name,
                "task_list": s.task_list,
                "start_time": naive(s.started_at),
                "continued_from_run_id": links[0],
                "parent_run_id": links[1],
                "replay_of_run_id": links[2],
                "version": 1,
                **row,
            }
            steps.append((self._runs.insert, self._runs.params(new_run), False))
        else:
            params = (*self._run_update.params(row), s.run_id, w.version)
            steps.append((self._set, params, False))
        if w.events:
            rows = [self._events.params(r) for r in event_rows(s.run_id, w.events)]
            steps.append((self._events.insert, rows, True))
        if w.tasks_gone:
            gone = [(s.run_id, kind, sid) for kind, sid in w.tasks_gone]
            steps.append((_DELETE_TASK, gone, True))
        now = naive(w.now.timestamp())
        if w.tasks_added:
            new_tasks = task_rows(s.namespace, s.run_id, w.tasks_added, now)
            added = [self._tasks.params(r) for r in new_tasks]
            steps.append((self._tasks.insert, added, True))
        if w.deadlines_gone:
            gone = [(s.run_id, kind, ref) for kind, ref in w.deadlines_gone]
            steps.append((_DELETE_DEADLINE, gone, True))
        if w.deadlines_added:
            due = [
                self._deadlines.params({"run_id": s.run_id, "kind": k, "ref_id": ref, "due": at})
                for k, ref, at in w.deadlines_added
            ]
            steps.append((self._deadlines.insert, due, True))
        if w.request:
            namespace, workflow_id, kind, request_id = w.request
            request = {
                "namespace": namespace,
                "workflow_id": workflow_id,
                "kind": kind,
                "request_id": request_id,
                "run_id": s.run_id,
                "created_at": now,
            }
            steps.append((self._requests.insert, self._requests.params(request), False))
        return steps


class _StepFailed(Exception):
    """A statement of a write failed (the error is its cause): `sql` says which."""

    def __init__(self, sql: str) -> None:
        super().__init__(sql)
        self.sql = sql


class _CommitFailed(Exception):
    """The COMMIT itself failed: not retried, as on the other write paths."""


def _transact(db: sqlite3.Connection, steps: Iterable[Step], *, compare_and_set: bool) -> bool:
    """Run `steps` in one write transaction. False, and nothing written, when
    the first (the run row's compare-and-set) finds the run at another version."""
    db.execute("BEGIN IMMEDIATE")  # the write lock up front, as every writer takes it
    try:
        for n, (sql, params, many) in enumerate(steps):
            try:
                cursor = db.executemany(sql, params) if many else db.execute(sql, params)
            except sqlite3.Error as exc:
                raise _StepFailed(sql) from exc
            if n == 0 and compare_and_set and cursor.rowcount != 1:
                db.execute("ROLLBACK")
                return False
    except BaseException:
        _roll_back(db)
        raise
    try:
        db.execute("COMMIT")
    except sqlite3.Error as exc:
        _roll_back(db)
        raise _CommitFailed() from exc
    return True


def _roll_back(db: sqlite3.Connection) -> None:
    if db.in_transaction:
        # (a failure here is beside the point: the error being raised says what went wrong)
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")

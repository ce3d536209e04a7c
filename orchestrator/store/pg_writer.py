"""The PostgreSQL hot path: psycopg 3 directly, each transition one prepared
call of `weft_apply` / `weft_create` (migration 0007) in autocommit, so one
round trip and one transaction write the run row, its events, its task and
deadline rows and the notifications (through libpq, `pg_calls`). Reads on the
hot path are single prepared statements in autocommit too.

Under load, writes are committed in groups: one transaction and one round trip
for the writes that waited while every committer was busy (`PgWriter.submit`).

Connections come from a small pool of its own, kept open (a closed connection
forgets its prepared statements) and handed out most-recently-used first.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC
from typing import Any

import psycopg
import structlog
from psycopg import errors as pg_errors
from psycopg import pq

from orchestrator.engine.errors import InvalidArgument, Unavailable

from . import pg_calls
from .notices import read_tasks_added, tasks_added
from .pending import Pending
from .rows import DbStats, naive
from .writes import Candidate, Conflict, RunWrite

log = structlog.get_logger("weft.store")

POOL_SIZE = 24
_LOAD = "SELECT state, version FROM runs WHERE run_id = %s"
_VERSION = "SELECT version FROM runs WHERE run_id = %s"
_CANDIDATES = (
    "SELECT t.id, t.run_id, t.scheduled_id, r.version FROM tasks t"
    " JOIN runs r ON r.run_id = t.run_id"
    " WHERE t.namespace = %s AND t.kind = %s AND t.task_list = %s ORDER BY t.id LIMIT %s"
)
_EVENTS = (
    "SELECT data FROM history_events"
    " WHERE run_id = %s AND event_id >= %s AND event_id <= %s ORDER BY event_id"
)
_EVENT = "SELECT data FROM history_events WHERE run_id = %s AND event_id = %s"
_FENCE = "SELECT pg_terminate_backend(%s)"
_ALIVE = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
_FENCE_WAIT = 5.0  # seconds to see a cut-off call's backend gone before giving up
_STOPPING = "the server is stopping; the outcome of the write is unknown"
_UNKNOWN = "database connection lost while committing; the outcome is unknown"
# Group commit: transactions of writes under way at once, and writes in one.
# With three, writes seldom wait at 4 workflows in flight, where waiting for a
# commit costs more than sharing it saves (`bench.hotpath`, 2026-11-27: two
# committers lost throughput there; three about kept it, noisily, and grouped at
# 16 in flight).
COMMITTERS = 3
GROUP_SIZE = 32
_FALLBACK = 4  # writes of a failed group done alone at once
_CLOSE_WAIT = 15.0  # seconds close() waits for the writes under way
# Unique keys that mean "taken": an open run of the workflow id, a request id
# used before. Any other unique violation is a bug, not a conflict.
CONFLICT_KEYS = frozenset({"ux_runs_open_workflow", "pk_request_ids"})

# Worth another go: serialization failure, deadlock, and a failover's codes.
_RETRY_STATES = {"40001", "40P01", "25006", "57P03"}
_ATTEMPTS = 8
# The backend was ended (an administrator, a crash): the call's outcome is unknown.
_ENDED = frozenset({"57P01", "57P02"})


class PgWriter:
    def __init__(
        self, conninfo: str, stats: DbStats, size: int = POOL_SIZE, *, grouping: bool = True
    ) -> None:
        self._conninfo = conninfo
        self._grouping = grouping
        self._stats = stats
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._slots = asyncio.Semaphore(size)
        self._closed = False
        self._stopping = False  # (`_give_up`)
        self._busy = 0  # committers under way (a write alone, or a group)
        self._queue: list[_Queued] = []
        self._groups: set[asyncio.Task[None]] = set()
        self._all_done = asyncio.Event()  # no write under way or waiting
        self._all_done.set()

    async def close(self) -> None:
        self._closed = True
        # Writes under way or waiting are committed, not dropped; unless the
        # database does not answer: then the groups are given up (Unavailable).
        try:
            await asyncio.wait_for(self._all_done.wait(), _CLOSE_WAIT)
        except TimeoutError:
            groups = list(self._groups)
            self._give_up()
            if groups:
                await asyncio.wait(groups, timeout=_CLOSE_WAIT)
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._slots:
            conn = self._idle.pop() if self._idle else None
            if conn is None or conn.closed:
                conn = await psycopg.AsyncConnection.connect(
                    self._conninfo,
                    autocommit=True,
                    prepare_threshold=0,
                    client_encoding="utf8",  # (pg_calls sends strings as UTF-8)
                )
            try:
                yield conn
            except BaseException as exc:
                # A connection that failed mid-call may be in any state: drop it,
                # unless the server refused the call and the connection is idle again.
                if _refused_by_server(exc) and _idle(conn) and not self._closed:
                    self._idle.append(conn)
                else:
                    await conn.close()
                raise
            if not self._closed and not conn.closed:
                self._idle.append(conn)
            else:
                await conn.close()

    async def _read(self, query: str, params: tuple[Any, ...]) -> list[Any]:
        """One prepared statement's rows; reads are safe to repeat, so a lost
        connection or a retryable error is retried."""
        delay = 0.02
        for attempt in range(_ATTEMPTS):
            try:
                async with self._conn() as conn:
                    self._stats.statements += 1
                    cur = await conn.execute(query, params, prepare=True)
                    return await cur.fetchall()
            except psycopg.errors.DatabaseError as exc:
                if attempt == _ATTEMPTS - 1 or not _retryable(exc):
                    raise Unavailable(f"database unavailable: {exc}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    # -- reads ------------------------------------------------------------------------

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

    # -- the write --------------------------------------------------------------------

    def submit(self, w: RunWrite, links: tuple[str, str, str] = ("", "", "")) -> Pending[bool]:
        """Apply `w` if the run is still at `w.version` (or, new, does not exist).
        The `Pending` returned comes to True, or to False if another writer came
        first; its `seen` raises Conflict when a unique key was taken (an open
        run of the workflow id, a request id), and Unavailable when the database
        could not be reached or the outcome of the call is unknown. The write
        goes on to its end if its caller is cancelled meanwhile. (`submit`
        itself raises only for a value it cannot send: a string holding a NUL.)

        Group commit: at most `COMMITTERS` transactions of writes are under way
        at once. A write that finds them all busy waits in a queue, and the next
        one to end takes everything queued (up to `GROUP_SIZE`) as one
        transaction in one round trip (`pg_calls.call_all`): what the server
        and the database spend per round trip and per commit is then shared.
        A write that finds a committer free goes alone, at once, in a task of
        its own. Without `grouping`, every write goes alone.
        """
        queued = _Queued(w, links, *_call_of(w, links))
        if self._busy < COMMITTERS or not self._grouping:
            self._busy += 1
            self._all_done.clear()
            task = asyncio.ensure_future(self._write_alone(queued))
            task.add_done_callback(functools.partial(self._alone_done, queued.pending))
            queued.pending.task = task
        else:
            self._queue.append(queued)  # (settled by the group that takes it)
        return queued.pending

    def _alone_done(self, pending: Pending[bool], task: asyncio.Task[bool]) -> None:
        """A write that went alone ended (or was cancelled before it began):
        settle it, and let its committer take what queued meanwhile."""
        pending.take(task)
        if task.cancelled():
            self._give_up()
        self._next_group()

    def _give_up(self) -> None:
        """A committer was cancelled: the loop is closing (or `close` gave up).
        No group starts from now on; those under way are cancelled and the
        writes waiting are dropped, so that no caller waits on a write nobody
        will make (a group started as the loop swept its tasks would escape
        the sweep)."""
        self._stopping = True
        for group in list(self._groups):
            group.cancel()  # (each settles its writes: Unavailable)
        self._drop_queue()

    def _drop_queue(self) -> None:
        """The writes still waiting for a committer are not made: Unavailable."""
        waiting, self._queue = self._queue, []
        for queued in waiting:  # (never sent: not written)
            queued.settle(Unavailable("the server is stopping; the write was not made"))

    def _next_group(self) -> None:
        """A committer is free: give it the queued writes, or let it go."""
        if self._stopping:
            self._drop_queue()
        if not self._queue:
            self._busy -= 1
            if not self._busy:
                self._all_done.set()
            return
        group, self._queue = self._queue[:GROUP_SIZE], self._queue[GROUP_SIZE:]
        task = asyncio.ensure_future(self._write_group(group))
        self._groups.add(task)
        task.add_done_callback(functools.partial(self._group_done, group))

    def _group_done(self, group: list[_Queued], task: asyncio.Task[None]) -> None:
        self._groups.discard(task)
        for queued in group:  # (a task cancelled before it ran settled nothing)
            queued.settle(Unavailable(_STOPPING))
        if task.cancelled():
            self._give_up()
        self._next_group()

    async def _write_group(self, group: list[_Queued]) -> None:
        """Commit the group as one transaction and settle each write's outcome.
        A group that fails wrote nothing (or, cut off during its commit, all or
        nothing): each write is then done alone, which gives each its own
        outcome and error."""
        try:
            if len(group) == 1:
                outcomes = [await self._outcome_alone(group[0])]
            else:
                outcomes = await self._try_group(group)
        except BaseException as exc:
            # A bug, or the loop closing (cancelled): no outcome is known.
            failure = exc if isinstance(exc, Exception) else Unavailable(_STOPPING)
            for queued in group:
                queued.settle(failure)
            if failure is not exc:
                raise
            return
        for queued, outcome in zip(group, outcomes, strict=True):
            queued.settle(outcome)

    async def _try_group(self, group: list[_Queued]) -> list[bool | BaseException]:
        # A group holds its runs' rows until it commits. In run order, two
        # groups take them in the same order. A cycle may still close with a
        # transaction that locks runs one by one (a signal between runs, a child
        # and its parent), or between groups of starts waiting on each other's
        # unique keys: PostgreSQL ends one side after `deadlock_timeout` (40P01),
        # and that side is done again.
        order = sorted(range(len(group)), key=lambda i: group[i].w.run_id)
        calls = _with_notices_distinct([group[i] for i in order])
        backend = 0
        try:
            async with self._conn() as conn:
                self._stats.statements += len(group)
                backend = conn.info.backend_pid
                written = await pg_calls.call_all(conn, calls)
                self._stats.transactions += 1
        except psycopg.errors.DatabaseError as exc:
            lost = backend if _lost(exc) else 0
            if lost and not await self._fenced(lost):
                return [Unavailable(_UNKNOWN) for _ in group]
            turns = asyncio.Semaphore(_FALLBACK)

            async def alone(queued: _Queued) -> bool:
                async with turns:
                    return await self._write_alone(queued, after_loss=bool(lost))

            tries = (alone(queued) for queued in group)
            return list(await asyncio.gather(*tries, return_exceptions=True))
        outcomes: list[bool | BaseException] = [False] * len(group)
        for i, ok in zip(order, written, strict=True):
            outcomes[i] = ok
        return outcomes

    async def _outcome_alone(self, queued: _Queued) -> bool | BaseException:
        """`_write_alone`'s outcome, its error as a value (as a group's are):
        awaited in the group's own task, not in one made for it."""
        try:
            return await self._write_alone(queued)
        except Exception as exc:
            return exc

    async def _write_alone(self, queued: _Queued, *, after_loss: bool = False) -> bool:
        """One write in a transaction of its own, retried while the database
        says it may pass. `after_loss`: a transaction that held it was cut off
        and its backend is gone: it landed if the run holds it."""
        w, events = queued.w, queued.events
        if after_loss and await self._holds(w, events):
            return True
        delay = 0.02
        for attempt in range(_ATTEMPTS):
            backend = 0
            try:
                async with self._conn() as conn:
                    self._stats.statements += 1
                    backend = conn.info.backend_pid
                    written = await pg_calls.call(conn, queued.statement, queued.encoded)
                    self._stats.transactions += 1
                    return written
            except pg_errors.UniqueViolation as exc:
                if exc.diag.constraint_name not in CONFLICT_KEYS:
                    raise
                raise Conflict(str(exc)) from exc
            except pg_errors.DataError as exc:
                raise _does_not_fit(exc) from exc
            except psycopg.errors.DatabaseError as exc:
                if backend and _lost(exc) and await self._landed(w, events, backend):
                    return True
                if attempt == _ATTEMPTS - 1 or not _retryable(exc):
                    raise Unavailable(f"database unavailable: {exc}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    async def _landed(self, w: RunWrite, events: list[bytes], backend: int) -> bool:
        """After the connection was lost during the call: did the write commit?

        The server may still be running the call, and may commit it after we
        look: so the backend that ran it is ended first and seen gone (else
        the outcome is unknown). Then the write landed if the run holds it.
        """
        if not await self._fenced(backend):
            raise Unavailable(_UNKNOWN)
        return await self._holds(w, events)

    async def _fenced(self, backend: int) -> bool:
        """End the backend that ran a cut-off call; whether it was seen gone."""
        try:
            await self._read(_FENCE, (backend,))
            deadline = asyncio.get_running_loop().time() + _FENCE_WAIT
            while await self._read(_ALIVE, (backend,)):
                if asyncio.get_running_loop().time() > deadline:
                    return False
                await asyncio.sleep(0.05)
        except Unavailable:
            return False
        return True

    async def _holds(self, w: RunWrite, events: list[bytes]) -> bool:
        """Whether the run holds the write. Other writers may have moved the run
        on since, so its version says nothing: the write landed if the run holds
        its first event, byte for byte. A write without events landed if the run
        is one version on and holds exactly the state it wrote."""
        try:
            if events:
                rows = await self._read(_EVENT, (w.run_id, w.events[0].event_id))
                return bool(rows) and bytes(rows[0][0]) == events[0]
            rows = await self._read(_LOAD, (w.run_id,))
        except Unavailable:
            raise Unavailable(_UNKNOWN) from None
        return bool(rows) and int(rows[0][1]) == w.version + 1 and rows[0][0] == w.state_json


class _Queued:
    """One write on its way: its prepared call, and the outcome its caller waits for."""

    __slots__ = ("encoded", "events", "links", "pending", "statement", "w")

    def __init__(
        self,
        w: RunWrite,
        links: tuple[str, str, str],
        statement: bytes,
        encoded: pg_calls.Encoded,
        events: list[bytes],
    ) -> None:
        self.w, self.links, self.statement, self.encoded = w, links, statement, encoded
        self.events = events
        self.pending: Pending[bool] = Pending()

    def settle(self, outcome: bool | BaseException) -> None:
        """(Once: what comes after the first outcome is dropped.)"""
        if isinstance(outcome, BaseException):
            self.pending.fail(outcome)
        else:
            self.pending.end(outcome)


def _with_notices_distinct(group: list[_Queued]) -> list[tuple[bytes, pg_calls.Encoded]]:
    """The group's calls, each write's notices of tasks added made distinct from
    those of the writes before it that name the same list (`tasks_added`'s
    `nth`): in one transaction PostgreSQL would deliver them once. Each write
    keeps its own notice, sent only if that write is applied. Writes whose
    notices change are encoded again; alone, each keeps its own encoding."""
    sent: Counter[str] = Counter()
    calls: list[tuple[bytes, pg_calls.Encoded]] = []
    for queued in group:
        notify = []
        for payload in queued.w.notify:
            nth = sent[payload]
            sent[payload] += 1
            if nth:
                node, added, key = read_tasks_added(payload)
                payload = tasks_added(node, key, added, nth=nth)
            notify.append(payload)
        if notify == queued.w.notify:
            calls.append((queued.statement, queued.encoded))
        else:
            statement, encoded, _ = _call_of(replace(queued.w, notify=notify), queued.links)
            calls.append((statement, encoded))
    return calls


def _call_of(
    w: RunWrite, links: tuple[str, str, str]
) -> tuple[bytes, pg_calls.Encoded, list[bytes]]:
    """The write as a prepared call: its name, its parameters, and its events' bytes."""
    s = w.state
    row = w.row()
    rest = _rest(w)
    if w.is_new:
        statement = pg_calls.CREATE
        params: tuple[pg_calls.Param, ...] = (
            s.run_id,
            s.namespace,
            s.workflow_id,
            s.type_name,
            s.task_list,
            naive(s.started_at),
            list(links),
            row["status"],
            row["close_time"],
            row["history_length"],
            row["state"],
            *rest,
        )
    else:
        statement = pg_calls.APPLY
        params = (
            s.run_id,
            w.version,
            row["status"],
            row["close_time"],
            row["history_length"],
            row["state"],
            *rest,
        )
    try:
        return statement, pg_calls.encode(params), rest[1]
    except pg_errors.DataError as exc:
        raise _does_not_fit(exc) from exc


def _rest(w: RunWrite) -> tuple[str, list[bytes]]:
    """The rows besides the run's, as the JSON document the functions read
    (migration 0007), and the events' bytes. Every event of a transition has
    the transition's time."""
    at = w.now.astimezone(UTC).replace(tzinfo=None).isoformat()
    rows = {
        "ev": [[e.event_id, e.type] for e in w.events],
        "at": at,
        "ns": w.state.namespace,
        "tdel": w.tasks_gone,
        "tadd": [[r.kind, r.task_list, r.scheduled_id] for r in w.tasks_added],
        "ddel": w.deadlines_gone,
        "dadd": [[k, ref, due.isoformat()] for k, ref, due in w.deadlines_added],
        "req": list(w.request) if w.request else None,
        "notify": w.notify,
        "changes": w.changes,
    }
    return json.dumps(rows, separators=(",", ":")), [e.SerializeToString() for e in w.events]


def _lost(exc: BaseException) -> bool:
    """The connection was lost (or its backend ended), so that a call's outcome
    is unknown. psycopg classes some errors the server answers with as
    OperationalError too (serialization failure, deadlock, lock timeout): those
    say that the call wrote nothing."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return not state or state.startswith("08") or state in _ENDED


def _refused_by_server(exc: BaseException) -> bool:
    """An error the server answered with (a SQLSTATE), not a lost connection."""
    return isinstance(exc, psycopg.Error) and bool(exc.sqlstate) and not _lost(exc)


def _idle(conn: psycopg.AsyncConnection[Any]) -> bool:
    pg = conn.pgconn
    return (
        pg.status == pq.ConnStatus.OK
        and pg.transaction_status == pq.TransactionStatus.IDLE
        and pg.pipeline_status == pq.PipelineStatus.OFF
    )


def _does_not_fit(exc: pg_errors.DataError) -> InvalidArgument:
    """Input the validators let through but a column cannot hold."""
    return InvalidArgument(f"a value does not fit the database: {exc}")


def _retryable(exc: psycopg.errors.DatabaseError) -> bool:
    """A lost connection, or an error the database says may pass (serialization
    failure, deadlock, a failover's read-only or starting-up states)."""
    return isinstance(exc, psycopg.OperationalError) or exc.sqlstate in _RETRY_STATES

"""The hot path's two writes as named prepared statements called through libpq
directly (`conn.pgconn`, psycopg's `pq` layer), with no cursor.

psycopg's `conn.execute(…, prepare=True)` builds a cursor, looks up a dumper for
each parameter and walks each list to type it, and handles the result in general,
on every call: 63 µs of CPU for a `weft_apply` call in a micro-benchmark, against
26 µs for the same round trip through `pgconn` with the parameters written here.
The two functions' parameters are few and fixed (migration 0007), so each is
written once, as text: strings, integers, timestamps, and the `varchar[]` and
`bytea[]` array literals.

A statement is prepared (SQL `PREPARE`, which shares the protocol's namespace of
statement names) when a call finds it missing: on a new connection, or one whose
session was reset.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq

APPLY = b"weft_apply_call"
CREATE = b"weft_create_call"
_PREPARE = {
    APPLY: "PREPARE weft_apply_call (varchar, bigint, varchar, timestamp, bigint, text,"
    " jsonb, bytea[]) AS SELECT weft_apply($1, $2, $3, $4, $5, $6, $7, $8)",
    CREATE: "PREPARE weft_create_call (varchar, varchar, varchar, varchar, varchar,"
    " timestamp, varchar[], varchar, timestamp, bigint, text, jsonb, bytea[]) AS"
    " SELECT weft_create($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
}
_CANCEL_WAIT = 5.0  # seconds for a cancelled call's backend to stop
_COPY = frozenset({pq.ExecStatus.COPY_IN, pq.ExecStatus.COPY_OUT, pq.ExecStatus.COPY_BOTH})

T = TypeVar("T")
Param = str | int | datetime | list[str] | list[bytes] | None
Encoded = list[bytes | None]


def encode(params: Sequence[Param]) -> Encoded:
    """The parameters as PostgreSQL's text input reads them; `DataError` for a
    string holding a NUL (libpq would send it cut short), before anything is sent."""
    return [_text(p) for p in params]


async def call(conn: psycopg.AsyncConnection[Any], name: bytes, params: Encoded) -> bool:
    """Call the prepared write `name` and return its boolean, once every result of
    the call is in: the commit comes after the row, and may fail after it. A
    database error is raised as psycopg raises it (the class of its SQLSTATE, with
    its diagnostics); a lost connection as `psycopg.OperationalError`."""
    try:
        return await _call(conn, name, params)
    except pg_errors.InvalidSqlStatementName:
        if name not in _PREPARE:
            raise
        # Not prepared on this connection (the call did not run): prepare, then call.
        # (The PREPARE itself is sent unprepared: a reset session would not know it.)
        await conn.execute(_PREPARE[name], prepare=False)
        return await _call(conn, name, params)


async def _call(conn: psycopg.AsyncConnection[Any], name: bytes, params: Encoded) -> bool:
    conn.pgconn.send_query_prepared(name, params)
    return _outcome(conn, await _exchange(conn, _results))


async def _exchange(
    conn: psycopg.AsyncConnection[Any],
    read: Callable[[asyncio.AbstractEventLoop, pq.abc.PGconn], Awaitable[T]],
) -> T:
    """Send what was queued on the connection, then `read` the answer."""
    pg = conn.pgconn
    loop = asyncio.get_running_loop()
    sent = False
    try:
        while pg.flush():  # non-blocking: 1 means more to send once the socket allows
            if await _ready(loop, pg.socket, write=True):
                pg.consume_input()  # (libpq: read what the server sends meanwhile)
        sent = True
        return await read(loop, pg)
    except asyncio.CancelledError:
        # Sent whole, the call runs to its end, commit included, even once the
        # connection is dropped: ask the backend to stop, and see it stop. Cut off
        # while sending, it never reached its Sync, so it cannot commit.
        if sent:
            with contextlib.suppress(Exception):
                await conn.cancel_safe(timeout=_CANCEL_WAIT)
                await asyncio.wait_for(read(loop, pg), _CANCEL_WAIT)
        raise


async def call_all(
    conn: psycopg.AsyncConnection[Any], calls: Sequence[tuple[bytes, Encoded]]
) -> list[bool]:
    """Call the prepared writes in one transaction and one round trip, and
    return their booleans in order: libpq's pipeline mode, with a single Sync
    after the last, so that the database runs them as one implicit transaction
    and commits all of them or none. An error, a call's or the commit's, is
    raised as `call` raises it, and then nothing was written (unless the
    connection was lost while the commit was under way: then the outcome is
    unknown, as for `call`). Statements missing on the connection are prepared,
    and the calls made again (the first try wrote nothing)."""
    try:
        return await _call_all(conn, calls)
    except pg_errors.InvalidSqlStatementName:
        names = sorted({name for name, _ in calls})
        if not all(name in _PREPARE for name in names):
            raise
        for name in names:
            with contextlib.suppress(pg_errors.DuplicatePreparedStatement):
                await conn.execute(_PREPARE[name], prepare=False)
        return await _call_all(conn, calls)


async def _call_all(
    conn: psycopg.AsyncConnection[Any], calls: Sequence[tuple[bytes, Encoded]]
) -> list[bool]:
    pg = conn.pgconn
    pg.enter_pipeline_mode()
    for name, params in calls:
        pg.send_query_prepared(name, params)
    pg.pipeline_sync()
    batches = await _exchange(conn, _through_sync)
    pg.exit_pipeline_mode()
    # Any error, in a call or in the commit that comes after the last call's
    # row (its own batch, before the Sync's), means that nothing was written.
    for batch in batches:
        for result in batch:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                _outcome(conn, [result], row=False)  # (raises it)
    # Without an error, the group may have committed: anything unexpected is
    # an unknown outcome (as a lost connection is), not a refusal.
    try:
        if len(batches) != len(calls) + 1:
            raise pg_errors.InternalError("the pipeline's results do not match its calls")
        return [_outcome(conn, batch) for batch in batches[:-1]]
    except pg_errors.InternalError as exc:
        raise psycopg.OperationalError(f"the outcome of the calls is unknown: {exc}") from exc


async def _through_sync(
    loop: asyncio.AbstractEventLoop, pg: pq.abc.PGconn
) -> list[list[pq.abc.PGresult]]:
    """A pipeline's results, a batch per call, up to and with its Sync's."""
    batches: list[list[pq.abc.PGresult]] = []
    while True:
        batch = await _results(loop, pg)
        if not batch:  # (every call and the Sync give a result: the connection failed)
            raise psycopg.OperationalError(pg.get_error_message() or "connection lost")
        batches.append(batch)
        if batch[-1].status == pq.ExecStatus.PIPELINE_SYNC:
            return batches


async def _results(loop: asyncio.AbstractEventLoop, pg: pq.abc.PGconn) -> list[pq.abc.PGresult]:
    """Every result of the call, up to the end of its exchange. `get_result` is
    only called when it will not block (libpq waits on the socket otherwise)."""
    results: list[pq.abc.PGresult] = []
    while True:
        while pg.is_busy():  # (parses what has been read; reads nothing itself)
            await _ready(loop, pg.socket, write=False)
            pg.consume_input()
        result = pg.get_result()
        if result is None:
            return results
        results.append(result)
        if result.status == pq.ExecStatus.PIPELINE_SYNC:
            return results  # (a pipeline's end has no empty result after it)
        if result.status in _COPY:
            return results  # (a COPY never ends by itself; no prepared call of ours starts one)


def _outcome(
    conn: psycopg.AsyncConnection[Any], results: list[pq.abc.PGresult], *, row: bool = True
) -> bool:
    """The call's boolean, or the first error among its results (`row=False`: a
    statement that returns no row, whose outcome is True unless it failed)."""
    pg, value = conn.pgconn, None
    for result in results:
        status = result.status
        if status == pq.ExecStatus.TUPLES_OK:
            value = result.get_value(0, 0) if value is None else value
        elif status != pq.ExecStatus.COMMAND_OK:
            if status != pq.ExecStatus.FATAL_ERROR:
                raise pg_errors.InternalError(f"unexpected result {pq.ExecStatus(status).name}")
            if not result.error_field(pq.DiagnosticField.SQLSTATE):
                # An error libpq made up itself: the connection was lost.
                message = result.get_error_message() or pg.get_error_message()
                raise psycopg.OperationalError(message or "connection lost")
            raise pg_errors.error_from_result(result, encoding=conn.info.encoding)
    if pg.status == pq.ConnStatus.BAD:
        raise psycopg.OperationalError(pg.get_error_message() or "connection lost")
    if not row:
        return True
    if value is None:
        raise psycopg.OperationalError("the call returned no row")
    return value == b"t"


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, *, write: bool) -> bool:
    """Until the socket can be read, or (with `write`) read or written: True if it
    can be read."""
    ready: asyncio.Future[bool] = loop.create_future()

    def wake(readable: bool) -> None:
        if not ready.done():
            ready.set_result(readable)
            # At once, not when the waiting task resumes: the loop's next select
            # comes first, and would report the socket (still unread) again.
            _forget(loop, fd, write)

    loop.add_reader(fd, wake, True)
    if write:
        loop.add_writer(fd, wake, False)
    try:
        return await ready
    finally:
        if ready.cancelled() or not ready.done():  # (`wake` never ran)
            _forget(loop, fd, write)


def _forget(loop: asyncio.AbstractEventLoop, fd: int, write: bool) -> None:
    loop.remove_reader(fd)
    if write:
        loop.remove_writer(fd)


def _text(value: Param) -> bytes | None:
    """A parameter as PostgreSQL's text input reads it."""
    if value is None:
        return None
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            raise TypeError("timestamps are sent naive, in UTC")
        return value.isoformat().encode()
    if not value:
        return b"{}"
    if isinstance(value[0], bytes):
        return b"{" + b",".join(b'"\\\\x' + bytes(v).hex().encode() + b'"' for v in value) + b"}"
    return b"{" + b",".join(_element(str(v)) for v in value) + b"}"


def _string(value: str) -> bytes:
    # libpq reads a text parameter up to its first NUL: one would cut it short.
    if "\x00" in value:
        raise pg_errors.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
    return value.encode()


def _element(value: str) -> bytes:
    """A string as an element of an array literal: quoted, `\\` and `"` escaped."""
    return b'"' + _string(value.replace("\\", "\\\\").replace('"', '\\"')) + b'"'

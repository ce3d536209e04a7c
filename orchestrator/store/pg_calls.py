"""The hot path's two writes as named prepared statements called through libpq
directly (`conn.pgconn`, psycopg's `pq` layer), with no cursor.

psycopg's `conn.execute(…, prepare=True)` builds a cursor, looks up a dumper for
each parameter and walks each list to type it, and handles the result in general,
on every call: 63 µs of CPU for a `weft_apply` call in a micro-benchmark, against
26 µs for the same round trip through `pgconn` with the parameters written here.
The two functions' parameters are few and fixed (migration 0007), so each is
written once, as text: strings, integers, timestamps, and the `varchar[]` and
`bytea[]` array literals.

Statements are prepared on each connection as it opens (`prepare`), by SQL
`PREPARE`, which shares the protocol's namespace of statement names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq

APPLY = b"weft_apply_call"
CREATE = b"weft_create_call"
_PREPARE = (
    "PREPARE weft_apply_call (varchar, bigint, varchar, timestamp, bigint, text, jsonb,"
    " bytea[]) AS SELECT weft_apply($1, $2, $3, $4, $5, $6, $7, $8)",
    "PREPARE weft_create_call (varchar, varchar, varchar, varchar, varchar, timestamp,"
    " varchar[], varchar, timestamp, bigint, text, jsonb, bytea[]) AS"
    " SELECT weft_create($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
)

Param = str | int | datetime | list[str] | list[bytes] | None


async def prepare(conn: psycopg.AsyncConnection[Any]) -> None:
    """Prepare both calls on a connection that has just opened."""
    for statement in _PREPARE:
        await conn.execute(statement)


async def call(conn: psycopg.AsyncConnection[Any], name: bytes, params: Sequence[Param]) -> bool:
    """Call a prepared write and return its boolean. A database error is raised as
    psycopg raises it (the class of its SQLSTATE, with its diagnostics); a lost
    connection as `psycopg.OperationalError`."""
    pg = conn.pgconn
    pg.send_query_prepared(name, [_text(p) for p in params])
    loop = asyncio.get_running_loop()
    while pg.flush():  # the connection is non-blocking: 1 means more to send
        await _ready(loop, pg.socket, write=True)
    pg.consume_input()
    while pg.is_busy():
        await _ready(loop, pg.socket, write=False)
        pg.consume_input()
    result = pg.get_result()
    while pg.get_result() is not None:  # (one statement: one result, then none)
        pass
    if result is None:
        raise psycopg.OperationalError(pg.get_error_message() or "no result from the server")
    if result.status != pq.ExecStatus.TUPLES_OK:
        raise pg_errors.error_from_result(result, encoding=conn.info.encoding)
    return result.get_value(0, 0) == b"t"


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, *, write: bool) -> None:
    """Until the socket can be written (or read)."""
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if write:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        if write:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


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

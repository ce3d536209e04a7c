"""The hot path's writes go to PostgreSQL through libpq with parameters written
by `pg_calls` itself: what PostgreSQL reads back must be exactly what was sent,
awkward strings, bytes and timestamps included, and its errors must come back as
psycopg raises them (the writer maps them by class and constraint)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors

from orchestrator.store import pg_calls

PUT = b"t_put"
AWKWARD = ["", 'a"b', "back\\slash", "{braces},comma", "NULL", " spaced ", "ünïcødé ✓", "'q'"]
BYTES = [b"", b"\x00\x01\x5c\x22\xff", bytes(range(256)), b"\\x41"]


@pytest.fixture
async def conn(postgres_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    conn = await psycopg.AsyncConnection.connect(
        postgres_url, autocommit=True, client_encoding="utf8"
    )
    await conn.execute(
        "CREATE TABLE t_calls (n bigint PRIMARY KEY, s varchar, at timestamp,"
        " names varchar[], data bytea[], doc jsonb)"
    )
    await conn.execute(
        "PREPARE t_put (bigint, varchar, timestamp, varchar[], bytea[], jsonb) AS"
        " WITH put AS (INSERT INTO t_calls VALUES ($1, $2, $3, $4, $5, $6) RETURNING n)"
        " SELECT count(*) = 1 FROM put"
    )
    yield conn
    await conn.close()


async def _row(conn: psycopg.AsyncConnection[Any], n: int) -> tuple[Any, ...]:
    cur = await conn.execute("SELECT s, at, names, data, doc FROM t_calls WHERE n = %s", (n,))
    row = await cur.fetchone()
    assert row is not None
    return tuple(row)


async def test_what_postgresql_reads_is_what_was_sent(conn: psycopg.AsyncConnection[Any]) -> None:
    at = datetime(2026, 11, 26, 12, 0, 0, 123456)
    doc = '{"k": "v \\"quoted\\" \\\\ ✓", "n": [1, 2]}'
    for n, text in enumerate(AWKWARD):
        assert await pg_calls.call(conn, PUT, [n, text, at, AWKWARD, BYTES, doc])
        s, got_at, names, data, got_doc = await _row(conn, n)
        assert (s, got_at, names, [bytes(b) for b in data]) == (text, at, AWKWARD, BYTES)
        assert got_doc == {"k": 'v "quoted" \\ ✓', "n": [1, 2]}


async def test_empty_lists_nulls_and_whole_seconds(conn: psycopg.AsyncConnection[Any]) -> None:
    whole = datetime(2026, 1, 2, 3, 4, 5)
    assert await pg_calls.call(conn, PUT, [1, None, whole, [], [], "null"])
    assert await _row(conn, 1) == (None, whole, [], [], None)
    assert await pg_calls.call(conn, PUT, [2, "x", None, None, None, None])
    assert await _row(conn, 2) == ("x", None, None, None, None)


async def test_a_nul_in_a_string_is_refused_before_anything_is_sent(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    for params in ([1, "a\x00b", None, [], [], None], [1, None, None, ["\x00"], [], None]):
        with pytest.raises(pg_errors.DataError, match="NUL"):
            await pg_calls.call(conn, PUT, params)
    assert await pg_calls.call(conn, PUT, [1, "after", None, [], [], None])  # still usable


async def test_database_errors_come_back_as_psycopg_raises_them(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    assert await pg_calls.call(conn, PUT, [7, "first", None, [], [], None])
    with pytest.raises(pg_errors.UniqueViolation) as taken:
        await pg_calls.call(conn, PUT, [7, "again", None, [], [], None])
    assert taken.value.diag.constraint_name == "t_calls_pkey"
    with pytest.raises(pg_errors.InvalidTextRepresentation):  # a DataError
        await pg_calls.call(conn, PUT, [8, None, None, [], [], "{not json"])
    with pytest.raises(pg_errors.InvalidSqlStatementName):
        await pg_calls.call(conn, b"no_such_statement", [])
    assert await _row(conn, 7) == ("first", None, [], [], None)  # nothing else written
    assert await pg_calls.call(conn, PUT, [9, "then", None, [], [], None])


async def test_a_lost_connection_is_an_operational_error(
    conn: psycopg.AsyncConnection[Any], postgres_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as other:
        await other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
        await pg_calls.call(conn, PUT, [1, "lost", None, [], [], None])


async def test_a_timezone_aware_timestamp_is_a_bug_not_a_value(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    from datetime import UTC

    with pytest.raises(TypeError, match="naive"):
        await pg_calls.call(conn, PUT, [1, None, datetime.now(UTC), [], [], None])

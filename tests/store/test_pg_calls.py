"""The hot path's writes go to PostgreSQL through libpq with parameters written
by `pg_calls` itself: what PostgreSQL reads back must be exactly what was sent,
awkward strings, bytes and timestamps included, and its errors must come back as
psycopg raises them (the writer maps them by class and constraint)."""

from __future__ import annotations

import asyncio
import collections
import selectors
import socket
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

import psycopg
import psycopg.conninfo
import pytest
from psycopg import errors as pg_errors
from psycopg import pq

from orchestrator.engine.errors import Unavailable
from orchestrator.store import dialect, pg_calls
from orchestrator.store.pg_writer import PgWriter
from orchestrator.store.rows import DbStats
from tests.pg_proxy import holding_proxy

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


async def put(conn: psycopg.AsyncConnection[Any], params: list[pg_calls.Param]) -> bool:
    return await pg_calls.call(conn, PUT, pg_calls.encode(params))


async def _row(conn: psycopg.AsyncConnection[Any], n: int) -> tuple[Any, ...]:
    cur = await conn.execute("SELECT s, at, names, data, doc FROM t_calls WHERE n = %s", (n,))
    row = await cur.fetchone()
    assert row is not None
    return tuple(row)


async def test_what_postgresql_reads_is_what_was_sent(conn: psycopg.AsyncConnection[Any]) -> None:
    at = datetime(2026, 11, 26, 12, 0, 0, 123456)
    doc = '{"k": "v \\"quoted\\" \\\\ ✓", "n": [1, 2]}'
    for n, text in enumerate(AWKWARD):
        assert await put(conn, [n, text, at, AWKWARD, BYTES, doc])
        s, got_at, names, data, got_doc = await _row(conn, n)
        assert (s, got_at, names, [bytes(b) for b in data]) == (text, at, AWKWARD, BYTES)
        assert got_doc == {"k": 'v "quoted" \\ ✓', "n": [1, 2]}


async def test_empty_lists_nulls_and_whole_seconds(conn: psycopg.AsyncConnection[Any]) -> None:
    whole = datetime(2026, 1, 2, 3, 4, 5)
    assert await put(conn, [1, None, whole, [], [], "null"])
    assert await _row(conn, 1) == (None, whole, [], [], None)
    assert await put(conn, [2, "x", None, None, None, None])
    assert await _row(conn, 2) == ("x", None, None, None, None)


async def test_a_nul_in_a_string_is_refused_before_anything_is_sent(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    bad: list[list[pg_calls.Param]] = [
        [1, "a\x00b", None, [], [], None],
        [1, None, None, ["\x00"], [], None],
    ]
    for params in bad:
        with pytest.raises(pg_errors.DataError, match="NUL"):
            pg_calls.encode(params)
    assert await put(conn, [1, "after", None, [], [], None])


async def test_database_errors_come_back_as_psycopg_raises_them(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    assert await put(conn, [7, "first", None, [], [], None])
    with pytest.raises(pg_errors.UniqueViolation) as taken:
        await put(conn, [7, "again", None, [], [], None])
    assert taken.value.diag.constraint_name == "t_calls_pkey"
    with pytest.raises(pg_errors.InvalidTextRepresentation):  # a DataError
        await put(conn, [8, None, None, [], [], "{not json"])
    with pytest.raises(pg_errors.InvalidSqlStatementName):
        await pg_calls.call(conn, b"no_such_statement", [])  # (not one to prepare)
    assert await _row(conn, 7) == ("first", None, [], [], None)  # nothing else written
    assert await put(conn, [9, "then", None, [], [], None])


@pytest.mark.parametrize("pipelined", [False, True], ids=["call", "call_all"])
async def test_a_lost_connection_is_an_operational_error(
    conn: psycopg.AsyncConnection[Any], postgres_url: str, pipelined: bool
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as other:
        await other.execute("SELECT pg_terminate_backend(%s, 5000)", (conn.info.backend_pid,))
    params = pg_calls.encode([1, "lost", None, [], [], None])
    with pytest.raises(psycopg.OperationalError):
        if pipelined:
            await pg_calls.call_all(conn, [(PUT, params)] * 2)
        else:
            await pg_calls.call(conn, PUT, params)


async def test_a_timezone_aware_timestamp_is_a_bug_not_a_value(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    from datetime import UTC

    with pytest.raises(TypeError, match="naive"):
        await put(conn, [1, None, datetime.now(UTC), [], [], None])


async def test_a_commit_that_fails_after_the_row_fails_the_call(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    """The row comes back before the commit, which may still fail (a deferred
    constraint here; a full notification queue or a serialization failure in
    Weft's functions): the call must say so, not return the row's answer."""
    await conn.execute(
        "ALTER TABLE t_calls ADD CONSTRAINT t_calls_s_once UNIQUE (s) DEFERRABLE INITIALLY DEFERRED"
    )
    assert await put(conn, [1, "once", None, [], [], None])
    with pytest.raises(pg_errors.UniqueViolation) as twice:
        await put(conn, [2, "once", None, [], [], None])
    assert twice.value.diag.constraint_name == "t_calls_s_once"
    cur = await conn.execute("SELECT count(*) FROM t_calls")
    assert await cur.fetchone() == (1,)


async def test_weft_calls_are_prepared_when_missing(postgres_url: str) -> None:
    """On a new connection, and again after the session dropped its statements
    behind psycopg's back, on a connection set up as the writer's are."""
    async with await psycopg.AsyncConnection.connect(
        postgres_url, autocommit=True, prepare_threshold=0, client_encoding="utf8"
    ) as conn:
        # A run that does not exist: weft_apply writes nothing and says so.
        params = pg_calls.encode(["no-such-run", 1, "open", None, 1, "{}", "{}", []])
        assert await pg_calls.call(conn, pg_calls.APPLY, params) is False
        conn.pgconn.exec_(b"DEALLOCATE ALL")  # (psycopg does not see it)
        assert await pg_calls.call(conn, pg_calls.APPLY, params) is False
        cur = await conn.execute("SELECT name FROM pg_prepared_statements", prepare=False)
        assert await cur.fetchall() == [("weft_apply_call",)]


async def test_a_cancelled_call_is_stopped_in_the_server(
    conn: psycopg.AsyncConnection[Any], postgres_url: str
) -> None:
    """Cancelled mid-call (as at the loop's shutdown), the call is cancelled in
    the server too: its row is not committed after the caller has given up."""
    await conn.execute(
        "PREPARE t_slow (bigint) AS WITH put AS (INSERT INTO t_calls (n) VALUES ($1)"
        " RETURNING n) SELECT count(*) = 1 FROM put, pg_sleep(2)"
    )
    pid = conn.info.backend_pid
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as other:

        async def activity() -> tuple[str, str] | None:
            cur = await other.execute(
                "SELECT state, coalesce(wait_event, '') FROM pg_stat_activity WHERE pid = %s",
                (pid,),
            )
            row = await cur.fetchone()
            return (row[0], row[1]) if row is not None else None

        async def until(done: Callable[[tuple[str, str] | None], bool]) -> None:
            deadline = asyncio.get_running_loop().time() + 5
            while not done(await activity()):
                assert asyncio.get_running_loop().time() < deadline, await activity()
                await asyncio.sleep(0.02)

        call = asyncio.ensure_future(pg_calls.call(conn, b"t_slow", pg_calls.encode([5])))
        await until(lambda seen: seen == ("active", "PgSleep"))  # the row is in, uncommitted
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # A call left running would commit once its sleep ends; one stopped is over.
        await until(lambda seen: seen is None or seen[0] != "active")
        cur = await other.execute("SELECT count(*) FROM t_calls")
        assert await cur.fetchone() == (0,)


async def test_the_loop_runs_while_an_error_s_end_is_slow_to_come(postgres_url: str) -> None:
    """libpq's get_result waits on the socket when the call's exchange is not
    over: after an error, the end of the exchange (ReadyForQuery) comes in a
    message of its own. Held back by a proxy (a process of its own), it must not
    stop the event loop."""
    info = psycopg.conninfo.conninfo_to_dict(postgres_url)
    upstream = (str(info.get("host") or "127.0.0.1"), int(str(info.get("port") or 5432)))
    with holding_proxy(upstream) as port:
        url = psycopg.conninfo.make_conninfo(
            postgres_url, host="127.0.0.1", port=port, sslmode="disable", gssencmode="disable"
        )
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, client_encoding="utf8"
        ) as slow:
            await slow.execute("CREATE TABLE t_once (n bigint PRIMARY KEY)")
            await slow.execute(
                "PREPARE t_once (bigint) AS WITH put AS (INSERT INTO t_once VALUES ($1)"
                " RETURNING n) SELECT count(*) = 1 FROM put"
            )
            assert await pg_calls.call(slow, b"t_once", pg_calls.encode([1]))
            loop = asyncio.get_running_loop()
            gaps: list[float] = []

            async def ticker() -> None:
                last = loop.time()
                while True:
                    await asyncio.sleep(0.01)
                    gaps.append(loop.time() - last)
                    last = loop.time()

            running = asyncio.ensure_future(ticker())
            with pytest.raises(pg_errors.UniqueViolation):
                await pg_calls.call(slow, b"t_once", pg_calls.encode([1]))
            running.cancel()
            assert gaps and max(gaps) < 0.2  # the loop went on through the 0.3 s hold
            # ...and the call returned only at the end of its exchange: the
            # connection is idle and takes the next call.
            assert slow.pgconn.transaction_status == pq.TransactionStatus.IDLE
            assert await pg_calls.call(slow, b"t_once", pg_calls.encode([2]))


async def test_the_writer_keeps_a_connection_the_server_only_refused(postgres_url: str) -> None:
    """A refusal (a SQLSTATE: a taken key, a value that does not fit) leaves the
    connection idle and in the pool; a lost one is dropped."""
    writer = PgWriter(dialect.libpq_url(postgres_url), DbStats(), size=1)
    try:
        [[first]] = await writer._read("SELECT pg_backend_pid()", ())
        with pytest.raises(Unavailable, match="division by zero"):
            await writer._read("SELECT 1 / 0", ())
        [[again]] = await writer._read("SELECT pg_backend_pid()", ())
        assert again == first
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as other:
            await other.execute("SELECT pg_terminate_backend(%s)", (first,))
        [[after]] = await writer._read("SELECT pg_backend_pid()", ())  # (a read is retried)
        assert after != first
    finally:
        await writer.close()


async def test_calls_in_a_pipeline_commit_together_or_not_at_all(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    """`call_all` sends several calls in one round trip, as one transaction: their
    booleans in order; the first error as `call` raises it, with nothing of the
    group written; and the connection usable again after."""

    def calls(*rows: int) -> list[tuple[bytes, pg_calls.Encoded]]:
        return [(PUT, pg_calls.encode([n, f"row {n}", None, [], [], None])) for n in rows]

    assert await pg_calls.call_all(conn, calls(1, 2, 3)) == [True, True, True]
    with pytest.raises(pg_errors.UniqueViolation):
        await pg_calls.call_all(conn, calls(4, 2, 5))  # 2 is taken: 4 and 5 are undone
    with pytest.raises(pg_errors.InvalidSqlStatementName):
        await pg_calls.call_all(conn, [*calls(6), (b"no_such_statement", [])])
    assert conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
    assert await put(conn, [7, "after", None, [], [], None])
    cur = await conn.execute("SELECT n FROM t_calls ORDER BY n")
    assert [n for (n,) in await cur.fetchall()] == [1, 2, 3, 7]


async def test_a_commit_that_fails_after_the_rows_fails_the_pipeline(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    """In a pipeline the commit comes after every call's row, and its error in a
    batch of its own: the calls must not be reported written."""
    await conn.execute(
        "ALTER TABLE t_calls ADD CONSTRAINT t_calls_s_once UNIQUE (s) DEFERRABLE INITIALLY DEFERRED"
    )
    calls = [(PUT, pg_calls.encode([n, "once", None, [], [], None])) for n in (1, 2)]
    with pytest.raises(pg_errors.UniqueViolation) as twice:
        await pg_calls.call_all(conn, calls)
    assert twice.value.diag.constraint_name == "t_calls_s_once"
    assert conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
    cur = await conn.execute("SELECT count(*) FROM t_calls")
    assert await cur.fetchone() == (0,)


async def test_weft_calls_in_a_pipeline_are_prepared_when_missing(postgres_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(
        postgres_url, autocommit=True, prepare_threshold=0, client_encoding="utf8"
    ) as conn:
        params = pg_calls.encode(["no-such-run", 1, "open", None, 1, "{}", "{}", []])
        assert await pg_calls.call_all(conn, [(pg_calls.APPLY, params)] * 2) == [False, False]
        conn.pgconn.exec_(b"DEALLOCATE ALL")
        assert await pg_calls.call_all(conn, [(pg_calls.APPLY, params)] * 2) == [False, False]


async def test_a_pipeline_s_booleans_come_back_in_the_calls_order(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    await conn.execute("PREPARE t_positive (bigint) AS SELECT $1 > 0")
    values = [3, -1, 5, 0, -2, 8]
    calls = [(b"t_positive", pg_calls.encode([v])) for v in values]
    assert await pg_calls.call_all(conn, calls) == [v > 0 for v in values]


async def test_the_loop_stops_watching_the_socket_when_the_wait_ends() -> None:
    """`_ready` watches the socket for one wait: woken (readable, or writable
    when asked) or cancelled, it leaves nothing registered with the loop, which
    would otherwise call a finished wait again and keep reporting the socket."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    with ours, theirs:
        fd = ours.fileno()
        readable = asyncio.ensure_future(pg_calls._ready(loop, fd, write=False))
        await asyncio.sleep(0.05)
        assert not readable.done()
        theirs.send(b"x")
        assert await asyncio.wait_for(readable, 5) is True
        assert not loop.remove_reader(fd)  # (False: nothing was registered)
        ours.recv(1)  # (nothing left to read)

        # A socket with room to send is writable at once: woken with False.
        assert await asyncio.wait_for(pg_calls._ready(loop, fd, write=True), 5) is False
        assert not loop.remove_reader(fd) and not loop.remove_writer(fd)

        cancelled = asyncio.ensure_future(pg_calls._ready(loop, fd, write=False))
        await asyncio.sleep(0.05)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert not loop.remove_reader(fd)


def test_a_woken_wait_is_not_reported_again() -> None:
    """Woken, `_ready` stops watching the socket at once, not when its waiter
    resumes: the loop's next select comes before that, and would report the
    socket (still unread) once more for nothing, at every wait of every call."""
    reported: collections.Counter[int] = collections.Counter()

    class Counting(selectors.DefaultSelector):
        def select(self, timeout: float | None = None) -> Any:
            ready = super().select(timeout)
            reported.update(key.fd for key, _ in ready)
            return ready

    loop = asyncio.SelectorEventLoop(Counting())
    ours, theirs = socket.socketpair()
    try:
        theirs.send(b"x")  # (left unread throughout)
        assert loop.run_until_complete(pg_calls._ready(loop, ours.fileno(), write=False))
        loop.run_until_complete(asyncio.sleep(0.01))  # (a few more turns of the loop)
        assert reported[ours.fileno()] == 1
    finally:
        loop.close()
        ours.close()
        theirs.close()

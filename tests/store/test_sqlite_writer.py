"""The SQLite hot path's own connections and threads: as durable as the pool's
connections; a write is all or nothing (a stale version, a failed statement and
a failed COMMIT each leave no row behind and the connection out of any
transaction); its rows are the ones SQLAlchemy writes (times as text with
microseconds); SQLite's errors reach the store as SQLAlchemy's; and a closed
writer refuses work."""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import DateTime, create_engine, insert, select
from sqlalchemy.exc import IntegrityError, OperationalError

from orchestrator.engine.errors import Unavailable
from orchestrator.engine.external import terminate
from orchestrator.engine.start import StartCommand, start_workflow
from orchestrator.store import dialect, schema
from orchestrator.store.sqlite_writer import SqliteWriter, _transact
from orchestrator.store.store import Store

# The time columns a run's writes fill (a request id's only with one given).
_TIME_COLUMNS = (
    ("runs", "start_time"),
    ("runs", "close_time"),
    ("history_events", "timestamp"),
    ("tasks", "created_at"),
    ("deadlines", "due"),
)


@pytest.fixture
async def hot(sqlite_url: str) -> AsyncIterator[SqliteWriter]:
    store = await Store.open(sqlite_url)
    writer = store._hot
    assert isinstance(writer, SqliteWriter)
    await _in_thread(
        writer,
        lambda db: db.executescript(
            "CREATE TABLE parent (id INTEGER PRIMARY KEY);"
            "CREATE TABLE child (parent_id INTEGER"
            " REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);"
            "CREATE TABLE row_count (n INTEGER);"
            "INSERT INTO row_count VALUES (0);"
        ),
    )
    yield writer
    await store.close()


async def _in_thread(writer: SqliteWriter, work: Any) -> Any:
    """`work(connection)` where the writer runs its writes, on their connection."""
    return await writer._writes.call(work, "test")


async def test_the_connection_is_as_durable_as_the_pools(hot: SqliteWriter) -> None:
    settings = await _in_thread(
        hot,
        lambda db: [
            db.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
        ],
    )
    assert settings == ["wal", 2, 1, 30000]  # synchronous 2 is FULL
    assert await _in_thread(hot, lambda db: db.isolation_level) is None  # BEGINs are ours


async def test_a_stale_version_writes_nothing(hot: SqliteWriter) -> None:
    steps = [
        ("UPDATE row_count SET n = n + 1 WHERE n = ?", (41,), False),
        ("INSERT INTO parent (id) VALUES (?)", [(1,), (2,)], True),
    ]
    wrote = await _in_thread(hot, lambda db: _transact(db, steps, compare_and_set=True))
    assert wrote is False
    assert await _in_thread(hot, _left_behind) == (0, 0, False)


async def test_a_failed_statement_rolls_the_write_back(hot: SqliteWriter) -> None:
    steps = [
        ("UPDATE row_count SET n = n + 1 WHERE n = ?", (0,), False),
        ("INSERT INTO parent (id) VALUES (?)", [(1,), (1,)], True),  # the key twice
    ]
    with pytest.raises(IntegrityError) as raised:
        await _in_thread(hot, lambda db: _transact(db, steps, compare_and_set=True))
    assert isinstance(raised.value.orig, sqlite3.IntegrityError)
    assert "[SQL: INSERT INTO parent (id) VALUES (?)]" in str(raised.value)  # the failed step
    assert await _in_thread(hot, _left_behind) == (0, 0, False)


async def test_a_failed_commit_is_unavailable_and_leaves_nothing(hot: SqliteWriter) -> None:
    # A deferred foreign key is checked by the COMMIT itself.
    steps = [
        ("UPDATE row_count SET n = n + 1 WHERE n = ?", (0,), False),
        ("INSERT INTO child (parent_id) VALUES (?)", (7,), False),
    ]
    with pytest.raises(Unavailable, match="commit failed; the outcome is unknown"):
        await _in_thread(hot, lambda db: _transact(db, steps, compare_and_set=True))
    assert await _in_thread(hot, _left_behind) == (0, 0, False)
    # The connection goes on: the next write commits.
    steps[1] = ("INSERT INTO parent (id) VALUES (?)", (7,), False)
    assert await _in_thread(hot, lambda db: _transact(db, steps, compare_and_set=True))
    assert await _in_thread(hot, _left_behind) == (1, 1, False)


async def test_sqlites_errors_come_back_as_sqlalchemys(hot: SqliteWriter) -> None:
    def bad_statement(db: sqlite3.Connection) -> None:
        db.execute("SELECT * FROM no_such_table")

    with pytest.raises(OperationalError, match="no such table") as raised:
        await _in_thread(hot, bad_statement)
    assert isinstance(raised.value.orig, sqlite3.OperationalError)


def _left_behind(db: sqlite3.Connection) -> tuple[int, int, bool]:
    """(the counter, parent rows, whether a transaction is still open)."""
    n = db.execute("SELECT n FROM row_count").fetchone()[0]
    parents = db.execute("SELECT count(*) FROM parent").fetchone()[0]
    return n, parents, db.in_transaction


async def test_times_are_bound_as_sqlalchemy_binds_them(hot: SqliteWriter, tmp_path: Any) -> None:
    """Every time column the writer sets, at a whole second (where sqlite3's own
    adapter would leave out the microseconds), as SQLAlchemy stores it."""
    moment = datetime(2026, 11, 27, 1, 30, 0)
    engine = create_engine(f"sqlite:///{tmp_path}/reference.db")
    schema.metadata.create_all(engine)
    bound: list[tuple[str, str, Any]] = []
    for rows in (
        hot._runs,
        hot._run_update,
        hot._events,
        hot._tasks,
        hot._deadlines,
        hot._requests,
    ):
        table = schema.metadata.tables[rows.insert.split()[2]]
        for n, name in enumerate(rows.names):
            if isinstance(table.c[name].type, DateTime):
                values = {k: moment if k == name else None for k in rows.names}
                bound.append((table.name, name, rows.params(values)[n]))
    assert {(t, c) for t, c, _ in bound} == {*_TIME_COLUMNS, ("request_ids", "created_at")}
    with engine.begin() as conn:
        conn.execute(insert(schema.deadlines).values(run_id="r", kind="k", ref_id=1, due=moment))
        stored = conn.exec_driver_sql("SELECT due FROM deadlines").scalar_one()
        assert conn.execute(select(schema.deadlines.c.due)).scalar_one() == moment
    engine.dispose()
    assert stored == "2026-11-27 01:30:00.000000"
    assert all(value == stored for _, _, value in bound), bound


async def test_a_runs_rows_hold_times_as_the_store_reads_them(sqlite_url: str) -> None:
    store = await Store.open(sqlite_url)
    try:
        run_id = str(uuid.uuid4())
        start = StartCommand("t", "", "tl", None, execution_timeout=60, decider_timeout=10)
        await store.create("default", "wf", run_id, "", lambda t: start_workflow(t, start))
        times = await _times(store)
        assert times["deadlines.due"] and times["tasks.created_at"]
        await store.transact(run_id, lambda t: terminate(t, "done", None, "test"))
        times = await _times(store)
        assert times["runs.close_time"] and times["history_events.timestamp"]
        for column, values in times.items():
            for kind, text in values:
                assert kind == "text" and re.fullmatch(_STAMP, text), (column, text)
        row = await store.find_run("default", "wf", run_id)
        assert row.status == "terminated" and row.close_time is not None
    finally:
        await store.close()


_STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}"


async def _times(store: Store) -> dict[str, list[tuple[str, str]]]:
    hot = store._hot
    assert isinstance(hot, SqliteWriter)

    def read(db: sqlite3.Connection) -> dict[str, list[tuple[str, str]]]:
        return {
            f"{t}.{c}": db.execute(
                f"SELECT typeof({c}), {c} FROM {t} WHERE {c} IS NOT NULL"
            ).fetchall()
            for t, c in _TIME_COLUMNS
        }

    result: dict[str, list[tuple[str, str]]] = await hot._reads.call(read, "test")
    return result


async def test_a_closed_writer_refuses_work_and_closes_once(sqlite_url: str) -> None:
    store = await Store.open(sqlite_url)
    hot = store._hot
    assert isinstance(hot, SqliteWriter)
    assert await hot.load("no-such-run") is None
    await store.close()
    with pytest.raises(Unavailable, match="the database is closed"):
        await hot.load("no-such-run")
    await hot.close()  # a second close does nothing


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        ("sqlite://", "a SQLite database needs a file"),
        ("sqlite:///:memory:", "a SQLite database needs a file"),
        ("sqlite:///weft.db?timeout=5", r"a SQLite URL takes no options \(timeout\)"),
    ],
)
async def test_a_database_the_hot_path_cannot_open_is_refused(url: str, refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        await Store.open(url)
    assert dialect.sqlite_path("postgresql://localhost/weft") is None


async def test_a_store_whose_hot_path_fails_to_close_still_closes_its_pool(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await Store.open(sqlite_url)
    writer = store._hot
    assert isinstance(writer, SqliteWriter)
    async with store._engine.connect() as conn:  # a connection the pool then keeps
        await conn.execute(select(schema.runs.c.run_id).limit(1))
    assert store._engine.pool.checkedin() == 1

    async def broken_close() -> None:
        raise OSError("disk gone")

    close_writes = writer._writes.close
    monkeypatch.setattr(writer._writes, "close", broken_close)
    with pytest.raises(OSError, match="disk gone"):
        await store.close()
    assert store._engine.pool.checkedin() == 0  # disposed all the same
    await close_writes()

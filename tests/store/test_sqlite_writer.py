"""The SQLite hot path's own connection and thread: it is as durable as the
pool's connections, a write is all or nothing (a stale version, a failed
statement and a failed COMMIT each leave no row behind and the connection out
of any transaction), and SQLite's errors reach the store as SQLAlchemy's."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from orchestrator.engine.errors import Unavailable
from orchestrator.store import dialect
from orchestrator.store.sqlite_writer import SqliteWriter, _transact
from orchestrator.store.store import Store


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
    """`work(connection)` where the writer runs its own work, on its connection."""
    return await writer._call(lambda: work(writer._conn()), "test", statements=0)


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


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
async def test_an_in_memory_database_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="a SQLite database needs a file"):
        await Store.open(url)
    assert dialect.sqlite_path("postgresql://localhost/weft") is None

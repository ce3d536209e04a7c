"""What differs between SQLite and PostgreSQL: engine set-up, row locking,
upserts, notices to other nodes, lock-name locks, the clock leases are judged
by, error classification. Beyond these the store branches on dialect only to
choose a strategy: the hot-path writer (store.py), the purge and a lock of a
run that skips a busy row (locked.py), the migration lock (migrate.py); and
outside the store, what exists on PostgreSQL only (the cross-node listener in
server.py, a contested leader lease in upkeep/leader.py)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import event, func, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql import Insert, Select
from sqlalchemy.sql.elements import ColumnElement

WRITE = "weft_write"

# PostgreSQL SQLSTATEs worth retrying: serialization failure, deadlock, and the
# codes a failover produces (read-only transaction, cannot connect now).
_PG_RETRY = {"40001", "40P01", "25006", "57P03", "0A000"}


def async_url(url: str) -> str:
    """Users write plain URLs; the server picks the async driver."""
    u = make_url(url)
    backend = u.get_backend_name()
    if backend == "sqlite":
        u = u.set(drivername="sqlite+aiosqlite")
    elif backend == "postgresql":
        u = u.set(drivername="postgresql+psycopg")
    else:
        raise ValueError(f"unsupported database {backend!r}: use sqlite:/// or postgresql://")
    return u.render_as_string(hide_password=False)


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite URL (None for another database). An in-memory
    database is refused: each of the server's connections would have its own."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return None
    if not u.database or u.database == ":memory:":
        raise ValueError("a SQLite database needs a file: sqlite:///path/to/weft.db")
    if u.query:
        # The hot path opens the file itself: driver options would apply to
        # the pool's connections only.
        raise ValueError(
            f"a SQLite URL takes no options ({', '.join(sorted(u.query))}): sqlite:///path/to/weft.db"
        )
    return u.database


def libpq_url(url: str) -> str:
    """A PostgreSQL URL as libpq (psycopg used directly) reads it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def display_url(url: str) -> str:
    """The URL with its password hidden, for logs."""
    return make_url(url).render_as_string(hide_password=True)


def create_engine(url: str) -> AsyncEngine:
    engine = create_async_engine(async_url(url))
    if engine.dialect.name == "sqlite":
        _configure_sqlite(engine)
    return engine


def configure_sqlite(dbapi_conn: Any) -> None:
    """Every SQLite connection of the server (the pool's, and the hot path's own)."""
    # We issue BEGIN ourselves: the driver's implicit transactions skip
    # SELECTs, which would make a read-modify-write non-atomic.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    # FULL: an acknowledged commit survives power loss too, not only kill -9.
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        configure_sqlite(dbapi_conn)

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Any) -> None:
        # Writers take the lock up front, so two writers never deadlock on an
        # upgrade from a read lock.
        conn.exec_driver_sql(
            "BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE) else "BEGIN"
        )


def for_update(query: Select[Any], is_pg: bool, skip_locked: bool = False) -> Select[Any]:
    # SQLite has no row locks: BEGIN IMMEDIATE already serialises writers.
    return query.with_for_update(skip_locked=skip_locked) if is_pg else query


async def notify(conn: AsyncConnection, is_pg: bool, channel: str, payload: str) -> None:
    """Tell the other nodes (notices.py). Transactional: delivered on commit only,
    so a node woken by it always finds the rows. SQLite has no other nodes."""
    if is_pg:
        await conn.execute(
            text("SELECT pg_notify(:ch, :payload)"), {"ch": channel, "payload": payload}
        )


_LOCK_NAME_XACT = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))")


async def lock_names(conn: AsyncConnection, is_pg: bool, keys: Iterable[str]) -> None:
    """Hold these names until the transaction ends, in the order given (callers
    sort them, so that two transactions take shared names in one order). SQLite
    serialises writers already."""
    if is_pg:
        for key in keys:
            await conn.execute(_LOCK_NAME_XACT, {"key": key})


def clock(is_pg: bool, now: datetime) -> ColumnElement[datetime] | datetime:
    """The time leases and sessions are judged by: the database's on PostgreSQL,
    so that nodes whose clocks disagree judge alike; `now` (naive UTC) on SQLite,
    which has one node."""
    if is_pg:
        return func.timezone("UTC", func.now())
    return now


def upsert(
    is_pg: bool,
    table: Any,
    values: dict[str, Any],
    keys: list[str],
    update: dict[str, Any] | None = None,
) -> Insert:
    """Insert `values`; on a key conflict, update with `update` (default: all of `values`)."""
    ins = postgresql.insert(table) if is_pg else sqlite.insert(table)
    if update is None:
        update = {k: v for k, v in values.items() if k not in keys}
    return ins.values(**values).on_conflict_do_update(index_elements=keys, set_=update)


def upsert_many(is_pg: bool, table: Any, keys: list[str], update: list[str]) -> Insert:
    """An insert to run with many rows: each row that hits a key updates `update`
    to its own new values."""
    ins = postgresql.insert(table) if is_pg else sqlite.insert(table)
    return ins.on_conflict_do_update(
        index_elements=keys, set_={name: ins.excluded[name] for name in update}
    )


def insert_ignoring(is_pg: bool, table: Any, keys: list[str]) -> Insert:
    """An insert to run with many rows: a row whose key is there already is skipped."""
    ins = postgresql.insert(table) if is_pg else sqlite.insert(table)
    return ins.on_conflict_do_nothing(index_elements=keys)


def is_conflict(exc: BaseException) -> bool:
    """Serialization failure or deadlock: another transaction won."""
    return getattr(getattr(exc, "orig", None), "sqlstate", None) in ("40001", "40P01")


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = getattr(exc, "orig", None)
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate in _PG_RETRY:
        return True
    # Not SQLite's "database is locked": busy_timeout has already waited 30 s for it.
    text = str(orig or exc).lower()
    return isinstance(exc, OperationalError) and ("connection" in text or "server closed" in text)

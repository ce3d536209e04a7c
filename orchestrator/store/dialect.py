"""What differs between SQLite and PostgreSQL: engine set-up, row locking,
upserts, error classification. Nothing else in the store branches on dialect."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.sql import Insert, Select

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


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        # We issue BEGIN ourselves (below): the driver's implicit transactions
        # skip SELECTs, which would make a read-modify-write non-atomic.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        # FULL: an acknowledged commit survives power loss too, not only kill -9.
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

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

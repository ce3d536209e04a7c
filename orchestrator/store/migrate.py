"""Schema migrations (Alembic), run by the server at start-up.

On PostgreSQL several nodes may start together, so the upgrade runs under an
advisory lock; SQLite has one node and serialises writers anyway.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

import structlog
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Connection, make_url

from orchestrator.store.schema import metadata

MIGRATIONS = Path(__file__).parent / "migrations"
_ADVISORY_KEY = 0x5745_4654_0001  # "WEFT" + 1
log = structlog.get_logger("weft.store")


def sync_url(url: str) -> str:
    """The synchronous driver for a user's URL (migrations only)."""
    u = make_url(url)
    if u.get_backend_name() == "postgresql":
        u = u.set(drivername="postgresql+psycopg")
    elif u.get_backend_name() == "sqlite":
        u = u.set(drivername="sqlite")
    return u.render_as_string(hide_password=False)


def alembic_config(connection: Connection) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def _sqlite_file(url: str) -> Path | None:
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return Path(u.database)


def create_private_file(url: str) -> None:
    """A new SQLite database is created readable by its owner only: it holds the
    task-token key, API key hashes and every payload. (SQLite gives its -wal
    and -shm files the database file's permissions.)"""
    path = _sqlite_file(url)
    if path is None or path.exists():
        return
    with contextlib.suppress(FileExistsError):  # another process made it meanwhile
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _keep_private(conn: Connection, path: Path) -> None:
    """A file made beforehand that holds nothing yet (`touch weft.db` with the
    umask's mode, or `sqlite3 weft.db 'PRAGMA journal_mode=WAL'`, a header and
    no table) is made as private as a new database, with the -wal and -shm
    files SQLite has made beside it: Weft makes the database in it. A group's
    access given on purpose, without others', is kept. A file with anything in
    it keeps its owner's mode, said in a warning when others may read it."""
    if not conn.execute(text("SELECT count(*) FROM sqlite_master")).scalar():
        for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            with contextlib.suppress(FileNotFoundError, PermissionError):  # (not its owner)
                if file.is_file() and file.stat().st_mode & 0o007:
                    file.chmod(0o600)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o007:
        log.warning(
            "store.database_open_to_others",
            path=str(path),
            mode=oct(mode),
            hint=f"chmod 600 {path}: it holds API key hashes, the task-token key and every payload",
        )


def upgrade(url: str) -> None:
    create_private_file(url)
    sqlite_file = _sqlite_file(url)
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            is_pg = conn.dialect.name == "postgresql"
            if is_pg:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_KEY})
                conn.commit()
            try:
                config = alembic_config(conn)
                _check_made_by_weft(conn, config)
                if sqlite_file is not None:
                    _keep_private(conn, sqlite_file)
                command.upgrade(config, "head")
                conn.commit()
            finally:
                if is_pg:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_KEY})
                    conn.commit()
    finally:
        engine.dispose()


class ForeignSchema(RuntimeError):
    """The database is not one this Weft can migrate; nothing was changed."""


def _check_made_by_weft(conn: Connection, config: Config) -> None:
    """Refuse, before any change, a database that a newer Weft made (an older
    one would misread it), or that Weft did not make but that holds tables of
    its names: the upgrade would fail part way, and on SQLite (whose driver
    commits each `CREATE TABLE`) leave Weft's other tables behind in it."""
    tables = set(inspect(conn).get_table_names())
    version = None
    if "alembic_version" in tables:
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    if version is not None:
        try:
            ScriptDirectory.from_config(config).get_revision(str(version))
        except CommandError:
            raise ForeignSchema(
                f"the database's schema ({version}) is not one this Weft knows: made by a"
                " newer Weft (run that version, or a newer one), or not by Weft at all"
            ) from None
        return
    # No version yet (an empty alembic_version: a first upgrade cut off before
    # its first step ended, which on SQLite may have left some of Weft's tables:
    # those are refused as another program's are, the message says both).
    taken = sorted(tables & set(metadata.tables))
    if taken:
        raise ForeignSchema(
            f"the database holds tables named as Weft's ({', '.join(taken[:4])}) but no Weft"
            " schema version (another program's, or a first start cut off part way):"
            " give Weft a database of its own"
        )

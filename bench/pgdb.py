"""The benchmark's own PostgreSQL databases (created fresh, dropped at the
end; never the test databases) and the durability settings all of them share:
Weft, DBOS and the bare append run on the same cluster with the same settings."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

SETTINGS = (
    "server_version",
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "wal_sync_method",
    "shared_buffers",
    "max_connections",
)


def url(base: str, database: str) -> str:
    """postgresql://user@host:port/DATABASE from the base URL (its database replaced)."""
    root, _, _ = base.rstrip("/").rpartition("/")
    return f"{root}/{database}"


def recreate(admin_url: str, database: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


def drop(admin_url: str, database: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )


def settings(admin_url: str) -> dict[str, Any]:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        out: dict[str, Any] = {}
        for name in SETTINGS:
            row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            out[name] = row[0] if row else None
        return out

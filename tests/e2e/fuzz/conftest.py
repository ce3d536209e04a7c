"""Fixtures of the fuzz tests: one real `weft server` process per test module and
database (SQLite and PostgreSQL, as `db_url` does elsewhere), driven by a
synchronous gRPC client so that Hypothesis runs its examples in plain functions.

A subprocess, not an in-process server, so that "the server never crashes" is a
fact about a process: it still runs and still answers its health check.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from orchestrator.store import migrate
from tests.conftest import TEMPLATE_DB, _with_db
from tests.e2e.fuzz.target import FuzzServer
from tests.serverproc import ServerProcess

# Polls of empty task lists answer after this: it bounds what a fuzzed poll costs.
LONG_POLL = "100ms"


def _postgres_database(admin_url: str) -> Iterator[str]:
    """A migrated database of this module's own (copied from the session template)."""
    name = f"weft_fuzz_{uuid.uuid4().hex[:12]}"
    admin = create_engine(migrate.sync_url(admin_url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"'))
        yield _with_db(admin_url, name)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def fuzz_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FuzzServer]:
    """One server process for every example of a module, on each database."""
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    databases: Iterator[str] | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp}/weft.db"  # the server migrates it as it starts
    else:
        databases = _postgres_database(request.getfixturevalue("postgres_admin_url"))
        url = next(databases)
    proc = ServerProcess(url, tmp, name="fuzz", long_poll=LONG_POLL)
    asyncio.run(proc.start())
    server = FuzzServer(proc, create_engine(migrate.sync_url(url)))
    try:
        yield server
        # The last word: whatever the examples did, the process is still up.
        server.assert_alive()
    finally:
        server.close()
        if databases is not None:
            next(databases, None)

"""A node's own loops (the deadline scanner, the schedules, the lease, the
reaper…) each catch what the database throws and go on; one that ends before
the stop is a bug, and the node must not serve on without it (no deadline would
fire again). It is said (`Server.wait_for_fault`), `weft server` stops as for a
signal and fails with one line, and the stop still closes the store: no
PostgreSQL connection is left behind."""

from __future__ import annotations

import asyncio
import socket

import psycopg
import pytest
from sqlalchemy.engine import make_url

from cli import server_cmd
from orchestrator.config import ServerConfig
from orchestrator.server import Server
from orchestrator.timers.scanner import DeadlineScanner
from tests.helpers import wait_until


@pytest.fixture
def failing_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    async def run(self: DeadlineScanner) -> None:
        await asyncio.sleep(0.2)  # the node is up by then
        raise RuntimeError("a bug in the scanner")

    monkeypatch.setattr(DeadlineScanner, "run", run)


def _connections(postgres_url: str) -> int:
    """The sessions open on the test's own database, other than this one."""
    url = make_url(postgres_url)
    admin = url.set(drivername="postgresql", database="postgres")
    admin_url = admin.render_as_string(hide_password=False)
    with psycopg.connect(admin_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (url.database,)
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _none_left(postgres_url: str) -> None:
    """(A backend leaves pg_stat_activity a moment after its client closed.)"""

    async def none() -> bool:
        return _connections(postgres_url) == 0

    await wait_until(none, timeout=5)


def _config(db_url: str) -> ServerConfig:
    return ServerConfig(db_url=db_url, listen="127.0.0.1:0", long_poll=3.0, drain_grace=0.5)


@pytest.mark.usefixtures("failing_scanner")
async def test_a_loop_that_ends_is_said_and_the_stop_still_closes_the_store(
    postgres_url: str,
) -> None:
    node = Server(_config(postgres_url))
    await node.start()
    assert _connections(postgres_url) > 0
    said = await asyncio.wait_for(node.wait_for_fault(), 10)
    assert said == "its deadline-scanner loop stopped: RuntimeError('a bug in the scanner')"
    await node.stop()  # it used to raise the loop's error here, before closing the store
    await _none_left(postgres_url)


@pytest.mark.usefixtures("failing_scanner")
async def test_weft_server_stops_and_fails_when_a_loop_ends(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (the test process keeps CPython's collector settings: tests/cli/test_gc_settings.py)
    monkeypatch.setattr(server_cmd, "tune_collector", lambda: None)
    node = Server(_config(db_url))
    with pytest.raises(RuntimeError) as raised:
        await asyncio.wait_for(server_cmd._serve(node), 20)
    assert str(raised.value) == (
        "the node stopped: its deadline-scanner loop stopped: RuntimeError('a bug in the scanner')"
    )
    if db_url.startswith("postgresql"):
        await _none_left(db_url)


async def test_a_stop_is_not_a_fault(db_url: str) -> None:
    """The loops cancelled by the stop are not loops that ended on their own."""
    node = Server(_config(db_url))
    await node.start()
    await node.stop()
    assert node.fault is None


async def test_a_start_that_fails_leaves_nothing_running(postgres_url: str) -> None:
    """A start that fails once the loops run (the port is taken) ends them, not
    as faults, and closes the store before the error goes up."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node = Server(
            ServerConfig(db_url=postgres_url, listen=f"127.0.0.1:{port}", drain_grace=0.5)
        )
        with pytest.raises(RuntimeError, match="Failed to bind"):  # (gRPC says it so)
            await node.start()
    assert node.fault is None
    await _none_left(postgres_url)

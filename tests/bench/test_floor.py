"""The bench's floor server (`bench.floor`) measures what it says: every
counted call committed one transition (a run row moved on, two events
appended) and handed the run on to the other side, every run in flight moved,
the calls keep to the pace they are given, and a floor that cannot commit
fails the bench instead of printing a number."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import psycopg
import pytest

from bench import append, floor
from bench.processes import Process, free_port, python_module

pytestmark = pytest.mark.postgres


def _start(db_url: str, log_dir: Path) -> tuple[Process, str]:
    port = free_port()
    server = python_module("floor", "bench.floor", [str(port), db_url], log_dir).start()
    return server, f"127.0.0.1:{port}"


async def _ready(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        await channel.channel_ready()


@pytest.fixture
def floor_db(postgres_url: str) -> Iterator[str]:
    url = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    append.prepare(url, writers=1)
    yield url


async def test_every_counted_call_commits_a_transition_and_every_run_moves(
    floor_db: str, tmp_path: Path
) -> None:
    server, address = _start(floor_db, tmp_path)
    try:
        await _ready(address)
        result = await floor.load(address, "t", 4, seconds=1.0, warmup=0.2, server_cpu=server.cpu)
        server.check_alive()
    finally:
        server.stop()
    # Runs go back and forth: each side answers about as often as the other.
    assert result.decisions > 10 and result.activities > 10
    assert abs(result.decisions - result.activities) <= 2 * 4
    assert result.server_cpu_s > 0
    with psycopg.connect(floor_db) as conn:
        events, runs = conn.execute(
            "SELECT count(*), count(DISTINCT run_id) FROM append_events"
        ).fetchone() or (0, 0)
        moves = conn.execute(
            "SELECT coalesce(sum(version - 1), 0) FROM append_executions"
        ).fetchone()
    assert moves is not None
    # Each commit moved one run row on and appended its two events; calls
    # before and after the counted window commit too.
    assert events == 2 * moves[0] >= 2 * result.calls
    assert runs == 4  # the four runs in flight each went back and forth


async def test_calls_keep_to_the_pace_they_are_given(floor_db: str, tmp_path: Path) -> None:
    server, address = _start(floor_db, tmp_path)
    try:
        await _ready(address)
        unpaced = await floor.load(address, "free", 4, 1.0, 0.2, server.cpu)
        paced = await floor.load(address, "paced", 4, 1.0, 0.2, server.cpu, rate=100)
    finally:
        server.stop()
    assert unpaced.calls > 200  # (several hundred a second even on a slow day)
    assert 70 <= paced.calls <= 110


async def test_a_floor_that_writes_nothing_fails_the_load(floor_db: str, tmp_path: Path) -> None:
    with psycopg.connect(floor_db, autocommit=True) as conn:
        conn.execute("DELETE FROM append_executions WHERE id = 1")
    server, address = _start(floor_db, tmp_path)
    try:
        await _ready(address)
        with pytest.raises(RuntimeError, match="the floor server failed a call"):
            await floor.load(address, "t", 2, seconds=0.5, warmup=0.1, server_cpu=server.cpu)
    finally:
        server.stop()


async def test_a_floor_that_cannot_commit_fails_the_load(floor_db: str, tmp_path: Path) -> None:
    missing = floor_db.rsplit("/", 1)[0] + "/weft_no_such_database"
    server, address = _start(missing, tmp_path)
    try:
        await _ready(address)
        with pytest.raises(RuntimeError, match="the floor server failed a call"):
            await floor.load(address, "t", 2, seconds=0.5, warmup=0.1, server_cpu=server.cpu)
    finally:
        server.stop()

"""The bench's floor server (`bench.floor`) measures what it says: every
counted call committed one transition (a run row moved on, two events
appended) and handed the run on to the other side, every run in flight moved,
the calls keep to the pace they are given, and a floor that cannot commit
fails the bench instead of printing a number."""

from __future__ import annotations

import asyncio
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


async def _ready(server: Process, address: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            await asyncio.wait_for(channel.channel_ready(), 15)
        except TimeoutError:
            server.check_alive()  # (says why, when it died)
            raise


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
        await _ready(server, address)
        result = await floor.load(address, "t", 4, seconds=1.0, warmup=0.2, server_cpu=server.cpu)
        server.check_alive()
    finally:
        server.stop()
    # Runs go back and forth: each side answers about as often as the other.
    assert result.decisions > 10 and result.activities > 10
    # (a reply waits for the next task, so the window's edges cut each side differently)
    assert abs(result.decisions - result.activities) <= 3 * 4
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


async def test_the_floor_beside_a_weft_batch_is_paced_to_its_rpcs(
    floor_db: str, tmp_path: Path
) -> None:
    weft = {"activities_per_s": 40.0, "rpcs_per_activity": 2.5, "server_cpu_per_activity_ms": 5.0}
    server, address = _start(floor_db, tmp_path)
    try:
        await _ready(server, address)
        figures = await floor.figures(address, "t", 4, 1.0, 0.2, server.cpu, weft, 0.25)
    finally:
        server.stop()
    # The pace is a ceiling (40 activities/s x 2.5 RPCs = 100 calls/s): a loaded
    # machine may fall short of it (53 in one full `make test`), never pass it.
    assert 20 <= figures["floor.calls_per_s"] <= 110
    assert figures["floor.unpaced_calls_per_s"] > 200  # (hundreds even on a slow day)
    assert figures["floor.calls_per_s"] < figures["floor.unpaced_calls_per_s"] / 2


def test_weft_is_compared_with_the_paced_floor_at_its_rpcs_per_activity() -> None:
    paced = floor.FloorResult(decisions=50, activities=50, seconds=1.0, server_cpu_s=0.06)
    free = floor.FloorResult(decisions=150, activities=150, seconds=1.0, server_cpu_s=0.12)
    weft = {"activities_per_s": 40.0, "rpcs_per_activity": 2.5, "server_cpu_per_activity_ms": 5.0}
    figures = floor.compare(paced, free, weft, echo_cpu_per_call_ms=0.25)
    assert figures == pytest.approx(
        {
            "floor.calls_per_s": 100.0,
            "floor.server_cpu_per_call_ms": 0.6,
            "floor.server_cpu_per_activity_ms": 1.5,  # 0.6 ms x 2.5 RPCs
            "floor.unpaced_calls_per_s": 300.0,
            "floor.unpaced_server_cpu_per_activity_ms": 1.0,  # 0.4 ms x 2.5
            "weft.server_cpu_above_floor_ms": 3.5,
            "ratio.floor_cpu_per_activity_in_echo_calls": 6.0,
            "ratio.server_cpu_above_floor_in_echo_calls": 14.0,
            "ratio.server_cpu_per_activity_over_floor": 5.0 / 1.5,
        }
    )


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan"), float("inf")])
def test_a_pace_is_a_positive_rate(rate: float) -> None:
    with pytest.raises(ValueError, match="positive rate"):
        floor.Pace(rate)


@pytest.mark.parametrize("broken", ["a run row is missing", "the database is missing"])
async def test_a_floor_that_cannot_commit_fails_the_load(
    broken: str, floor_db: str, tmp_path: Path
) -> None:
    db_url = floor_db
    if broken == "a run row is missing":  # the statement then writes nothing
        with psycopg.connect(floor_db, autocommit=True) as conn:
            conn.execute("DELETE FROM append_executions WHERE id = 1")
    else:
        db_url = floor_db.rsplit("/", 1)[0] + "/weft_no_such_database"
    server, address = _start(db_url, tmp_path)
    try:
        await _ready(server, address)
        with pytest.raises(RuntimeError, match="the floor server failed a call"):
            await floor.load(address, "t", 2, seconds=0.5, warmup=0.1, server_cpu=server.cpu)
    finally:
        server.stop()

"""Seed 000's atomic increment (`examples/steps/atomic-increment.yaml`): ten runs
at once add one each to a counter kept by an activity, on PostgreSQL with two
`weft decider` processes, and the runner doing the work is killed with SIGKILL
right after one of its writes. The lock, the `from here only` replay point and
`retry limit 2 in 5s` make every increment land exactly once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sdk import AsyncClient
from tests.helpers import unique, wait_until
from tests.serverproc import ServerProcess
from tests.workerproc import WorkerProcess, spawn

N = 10


@pytest.fixture
def db_url(postgres_url: str) -> str:
    return postgres_url


def counter(path: Path, name: str) -> int:
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
    return int(row[0]) if row else 0


async def test_ten_runs_increment_exactly_ten_times_through_a_runner_kill(
    node: ServerProcess, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    counters, inflight = tmp_path / "counters.db", tmp_path / "inflight"
    env = {
        "WEFT_COUNTERS": str(counters),
        "WEFT_COUNTERS_INFLIGHT": str(inflight),
        "WEFT_COUNTERS_LINGER": "0.5",
    }
    for i in range(2):
        spawn(workers, node, tmp_path, "decider", f"decider-{i}", "--definitions", "examples/steps")
    doomed = spawn(workers, node, tmp_path, "runner", "runner-1", "examples.counters", env=env)
    name = unique("hits")
    async with AsyncClient(node.address) as client:
        ids = [unique("inc") for _ in range(N)]
        for wid in ids:
            await _start_when_registered(client, wid, name)

        assert doomed.proc is not None
        pid = str(doomed.proc.pid)

        async def mid_write() -> bool:
            return inflight.exists() and pid in inflight.read_text().split()

        await wait_until(mid_write, timeout=60)
        doomed.kill9()  # its write landed; its answer never will
        spawn(workers, node, tmp_path, "runner", "runner-2", "examples.counters", env=env)

        results = sorted([await client.result(wid) for wid in ids])
        assert results == list(range(1, N + 1))
        assert counter(counters, name) == N
        timed_out = [
            e
            for wid in ids
            for e in await client.history(wid)
            if e.type == "ActivityTimedOut" and e.get("timeout_type") == "HEARTBEAT"
        ]
        assert len(timed_out) == 1  # the killed write, redone by the replay
        assert await client.list_locks(f"counter-{name}") == []


async def _start_when_registered(client: AsyncClient, wid: str, name: str) -> None:
    """`weft decider --definitions` registers the type as it starts."""

    async def started() -> bool:
        try:
            await client.start_workflow("atomic-increment", {"counter": name}, workflow_id=wid)
        except Exception as exc:  # the type is not registered yet: no task list
            if "task_list" not in str(exc):
                raise
            return False
        return True

    await wait_until(started, timeout=30)

"""Many workflows contend for one lock on PostgreSQL, decided by several `weft
decider` processes at once and run by a `weft runner` with room for all of
them: the critical sections (timed by the runner) never overlap, and the lock
goes round in the order the runs queued for it."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from sdk import AsyncClient
from tests.helpers import unique, wait_until
from tests.serverproc import ServerProcess
from tests.workerproc import WorkerProcess, spawn

LOCK_FLOW = str(Path(__file__).with_name("lock_flow.py"))
N = 10


@pytest.fixture
def db_url(postgres_url: str) -> str:
    """Concurrent deciders need concurrent writers: PostgreSQL only."""
    return postgres_url


async def test_critical_sections_never_overlap_and_follow_the_queue(
    node: ServerProcess, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    deciders, runs = unique("deciders"), unique("sections")
    for i in range(3):
        name_i = f"decider-{i}"
        spawn(workers, node, tmp_path, "decider", name_i, "--task-list", deciders, LOCK_FLOW)
    spawn(
        workers, node, tmp_path, "runner", "runner", "--task-list", runs,
        "--concurrency", str(N + 2), LOCK_FLOW,
    )  # fmt: skip
    name, gate = unique("lock"), tmp_path / "gate"
    async with AsyncClient(node.address) as client:
        ids = [unique("wf") for _ in range(N)]
        for wid in ids:
            # Whoever holds the lock first waits inside until everyone queued (the
            # deciders take the runs in no set order); once open, the gate stays open.
            plan = {"lock": name, "task_list": runs, "seconds": 0.05, "gate": str(gate)}
            await client.start_workflow("locked-section", plan, workflow_id=wid, task_list=deciders)

        async def everyone_queued() -> list[str] | None:
            found = await client.list_locks(name)
            if not found or found[0].holder is None or len(found[0].waiters) != N - 1:
                return None
            return [found[0].holder.workflow_id] + [w.workflow_id for w in found[0].waiters]

        queue = await wait_until(everyone_queued, timeout=60, interval=0.1)
        assert sorted(queue) == sorted(ids)
        gate.touch()
        results = {wid: await client.result(wid) for wid in ids}

        # No two sections overlap, by the runner's clock.
        spans = sorted((r["start"], r["end"], wid) for wid, r in results.items())
        for (_, end, first), (start, _, second) in itertools.pairwise(spans):
            assert end <= start, f"{first} was still inside when {second} entered"
        # The lock went round in queue order, each grant naming the holder before.
        acquired = {}
        for wid in ids:
            [event] = [e for e in await client.history(wid) if e.type == "LockAcquired"]
            acquired[wid] = event
        by_time = sorted(ids, key=lambda wid: acquired[wid].timestamp)
        assert by_time == queue
        assert [s[2] for s in spans] == queue
        for before, after in itertools.pairwise(queue):
            assert acquired[after].get("previous_holder_workflow_id") == before
        assert await client.list_locks(name) == []

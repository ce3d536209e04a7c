"""A step workflow that runs for ever, on both databases: a real `weft decider`
process, a real gRPC server whose history limit is set low. The loop waits on
signals and holds a lock the whole time; it goes past three times the limit by
continuing as new on its own, with no `LockReleased` between its runs, and
another run waiting for the lock gets it only when the loop ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from orchestrator.config import ServerConfig
from orchestrator.engine.limits import Limits
from orchestrator.server import Server
from sdk import AsyncClient, Event
from sdk.events import CLOSE_TYPES
from tests.helpers import unique, wait_until
from tests.steps.test_continuation import LOOP, _consumed, runs_of, ticks
from tests.workerproc import WorkerProcess
from workers.steps.definition import load_file
from workers.steps.interpreter import check_history

LIMIT = 200
TICKS = 90  # about eight events a tick: more than three times the limit


@pytest.fixture
async def small_server(db_url: str) -> AsyncIterator[Server]:
    config = ServerConfig(
        db_url=db_url, listen="127.0.0.1:0", long_poll=2.0, limits=Limits(events_per_run=LIMIT)
    )
    node = Server(config)
    await node.start()
    yield node
    await node.stop(grace=0.5)


@pytest.fixture
async def client(small_server: Server) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(f"127.0.0.1:{small_server.port}") as sdk_client:
        yield sdk_client


@pytest.fixture
def decider_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "definitions"
    folder.mkdir()
    return folder


async def closed(client: AsyncClient, workflow_id: str) -> list[Event]:
    async def check() -> list[Event]:
        events = await client.history(workflow_id)
        return events if events and events[-1].type in CLOSE_TYPES else []

    return await wait_until(check, timeout=60)


async def test_a_locked_signal_loop_runs_past_three_history_limits(
    small_server: Server, client: AsyncClient, decider_dir: Path, tmp_path: Path
) -> None:
    task_list, lock = unique("steps"), unique("quota")
    loop_name, waiter_name = unique("loop"), unique("waiter")
    header = f"name: {loop_name}\ntask_list: {task_list}\nlock: {lock}\nretention: 10"
    (decider_dir / "loop.yaml").write_text(LOOP.format(settings=header))
    (decider_dir / "waiter.yaml").write_text(
        f"name: {waiter_name}\ntask_list: {task_list}\nlock: {lock}\n"
        "steps:\n  - return ${workflow.util.now}\n"
    )
    decider = WorkerProcess(
        "decider",
        ["--definitions", str(decider_dir)],
        f"127.0.0.1:{small_server.port}",
        tmp_path,
        "decider",
    ).start()
    try:

        async def registered() -> bool:
            assert decider.running, decider.log_tail()
            lines = [line for line in decider.log().splitlines() if '"decider.registered"' in line]
            return all(any(name in line for line in lines) for name in (loop_name, waiter_name))

        await wait_until(registered, timeout=30)
        loop = await client.start_workflow(loop_name, {}, task_list=task_list)
        await wait_until(lambda: _holds(client, loop.workflow_id, lock), timeout=30)
        waiter = await client.start_workflow(waiter_name, {}, task_list=task_list)
        await wait_until(lambda: _waits(client, lock, waiter.run_id), timeout=30)

        # Watch the lock while the loop runs: every look must find the loop
        # holding it (one of its runs) and the waiter still in the queue.
        holders: list[str] = []
        stop = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set():
                info = (await client.list_locks(lock))[0]
                assert info.holder is not None
                holders.append(info.holder.run_id)
                assert info.holder.workflow_id == loop.workflow_id
                assert [w.run_id for w in info.waiters] == [waiter.run_id]
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(watch())
        await ticks(TICKS - 1, stop_last=False)(client, loop.workflow_id)
        await wait_until(lambda: _waiting_for(client, loop.workflow_id, TICKS), timeout=30)
        stop.set()
        await watcher
        await client.signal(loop.workflow_id, "tick", {"n": TICKS, "stop": True})
        result = await client.result(loop.workflow_id, timeout=timedelta(seconds=60))
        waited = await closed(client, waiter.workflow_id)
    finally:
        decider.stop()

    assert result == {"count": TICKS, "total": TICKS * (TICKS + 1) // 2, "phase": "looping"}
    runs = await runs_of(client, loop.workflow_id)
    assert len(runs) >= 4 and sum(len(h) for h in runs) > 3 * LIMIT
    definition = load_file(decider_dir / "loop.yaml")
    for i, history in enumerate(runs):
        types = [e.type for e in history]
        assert "LockReleased" not in types
        assert len(history) <= LIMIT
        check_history(definition, history, "", loop.workflow_id)
        if i == 0:
            assert types.count("LockAcquired") == 1
            assert "retention" in _markers(history)
        else:
            carried = history[0].get("carried_locks")
            assert [(c["lock_name"], c.get("held")) for c in carried] == [(lock, True)]
            assert "LockRequested" not in types and "LockAcquired" not in types
            # Not marked again: the service carried it.
            assert "retention" not in _markers(history)
            assert history[0].get("retention") == "10"
        if i < len(runs) - 1:
            assert history[-1].type == "WorkflowContinuedAsNew"
    # The lock passed from run to run of the loop; each one held it in turn.
    chain = [loop.run_id, *(str(h[-1].get("new_run_id")) for h in runs[:-1])]
    assert set(holders) <= set(chain) and len(set(holders)) >= 3
    # The waiter got it only once the loop's last run had closed.
    acquired = next(e for e in waited if e.type == "LockAcquired")
    assert acquired.get("previous_holder_workflow_id") == loop.workflow_id
    assert acquired.get("previous_holder_run_id") == chain[-1]
    assert acquired.timestamp >= runs[-1][-1].timestamp
    assert waited[-1].type == "WorkflowSuccess"


def _markers(history: list[Event]) -> list[str]:
    return [str(e.get("marker_name")) for e in history if e.type == "Marker"]


async def _holds(client: AsyncClient, workflow_id: str, lock: str) -> bool:
    return any(
        e.type == "LockAcquired" and e.get("lock_name") == lock
        for e in await client.history(workflow_id)
    )


async def _waiting_for(client: AsyncClient, workflow_id: str, n: int) -> bool:
    return await _consumed(client, workflow_id, n - 1)


async def _waits(client: AsyncClient, lock: str, run_id: str) -> bool:
    found = [info for info in await client.list_locks() if info.lock_name == lock]
    return bool(found) and run_id in [w.run_id for w in found[0].waiters]

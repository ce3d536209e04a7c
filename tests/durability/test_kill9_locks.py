"""Invariants 6 and 7 together: a `weft server` killed with SIGKILL while a lock
has a holder and a queue of waiters loses neither; after the restart the queue
is still granted in request order, one holder at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, unique, wait_until
from tests.serverproc import ServerProcess


@pytest.fixture
async def node(db_url: str, tmp_path: Path) -> AsyncIterator[ServerProcess]:
    proc = ServerProcess(db_url, tmp_path, name="kill9-locks", long_poll="2s")
    await proc.start()
    yield proc
    proc.stop()


def request(name: str) -> d.Decision:
    return d.Decision(request_lock=d.RequestLockDecision(lock_name=name))


async def queue(admin: ag.AdminServiceStub, name: str) -> list[str]:
    """Holder first, then the waiters in order."""
    resp = await admin.ListLocks(a.ListLocksRequest(lock_name=name))
    if not resp.locks:
        return []
    info = resp.locks[0]
    head = [info.holder.workflow_id] if info.HasField("holder") else []
    return head + [w.workflow_id for w in info.waiters]


async def test_kill9_keeps_the_holder_and_the_queue(node: ServerProcess) -> None:
    name = unique("lock")
    async with node.channel() as channel:
        stub = sg.WorkflowServiceStub(channel)
        runs = [Driver(stub) for _ in range(5)]
        for wf in runs:
            await wf.start()
            await wf.decide(await wf.poll_decision(), request(name))
        before = await queue(ag.AdminServiceStub(channel), name)
        assert before == [wf.workflow_id for wf in runs]

    node.kill9()
    await node.restart()

    async with node.channel() as channel:
        stub = sg.WorkflowServiceStub(channel)
        admin = ag.AdminServiceStub(channel)
        assert await queue(admin, name) == before
        for wf in runs:
            wf.stub = stub
        # Each holder in turn has a decision task for its grant, closes, and hands on.
        for i, wf in enumerate(runs):
            assert await queue(admin, name) == before[i:]
            task = await wait_until(lambda wf=wf: _task(wf))
            await wf.decide(task, complete(i))
        assert await queue(admin, name) == []
        for i, wf in enumerate(runs[1:], start=1):
            acquired = [e for e in await wf.history() if e.type == "LockAcquired"]
            assert len(acquired) == 1
            assert acquired[0].lock_acquired.previous_holder_workflow_id == runs[i - 1].workflow_id


async def _task(wf: Driver) -> object:
    task = await wf.poll_decision()
    return task if task.task_token else None

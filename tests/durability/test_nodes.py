"""Server nodes and the upkeep leader (README "Workers and nodes"), with real
`weft server` processes: on PostgreSQL two nodes share the database; kill -9 of
the leader hands the lease to the other within two lease periods, and the
upkeep goes on there (the worker-session reaper, the retention purge, the
schedules); the
killed node, started again, reports its unexpected shutdown. `weft nodes`
shows it all. On SQLite the one node always leads."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orchestrator.config import ServerConfig
from orchestrator.server import Server
from sdk import AsyncClient
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.e2e.test_retention_job import retention
from tests.helpers import Driver, complete, schedule, wait_until
from tests.serverproc import WEFT, ServerProcess

LEASE = 2.0


def weft(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WEFT), *args, "--address", address], capture_output=True, text=True, timeout=60
    )


def node_args(name: str) -> tuple[str, ...]:
    return ("--node-name", name, "--lease-period", f"{LEASE}s", "--purge-interval", "300ms")


@pytest.fixture
def nodes(postgres_url: str, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    started = [
        ServerProcess(postgres_url, tmp_path, name=name, extra_args=node_args(name))
        for name in ("node-a", "node-b")
    ]
    yield started
    for node in started:
        node.stop()


async def leader_seen_by(client: AsyncClient) -> str:
    return (await client.list_nodes()).leader


async def test_the_leader_dies_and_the_other_node_leads_within_two_lease_periods(
    nodes: list[ServerProcess],
) -> None:
    a, b = nodes
    await a.start()
    async with AsyncClient(a.address) as via_a:
        await wait_until(lambda: _is(via_a, "node-a"), timeout=10)
    await b.start()
    async with AsyncClient(b.address) as via_b:
        # A schedule that fires every second; its runs are started by the leader.
        await via_b.create_schedule(
            "tick",
            workflow_type="tick",
            task_list="tl-tick",
            every=timedelta(seconds=1),
            overlap="allow",
        )
        await wait_until(lambda: _started(via_b, 2), timeout=10)
        listed = await via_b.list_nodes()
        assert {(n.node_id, n.status) for n in listed.nodes} == {
            ("node-a", "ready"),
            ("node-b", "ready"),
        }
        assert listed.leader == "node-a"

        a.kill9()
        killed = time.monotonic()
        await wait_until(lambda: _is(via_b, "node-b"), timeout=4 * LEASE, interval=0.05)
        took = time.monotonic() - killed
        assert took <= 2 * LEASE, f"node-b led {took:.2f} s after the kill"

        # The schedule goes on from node-b: runs for slots after the kill, and
        # no slot started twice (each slot's workflow id is its own).
        after_kill = (await via_b.describe_schedule("tick")).started
        await wait_until(lambda: _started(via_b, after_kill + 3), timeout=10)
        async with b.channel() as channel:
            listed = await sg.WorkflowServiceStub(channel).ListWorkflows(
                s.ListWorkflowsRequest(workflow_type="tick", page_size=1000)
            )
        ids = Counter(e.execution.workflow_id for e in listed.executions)
        assert len(ids) >= after_kill + 3 and set(ids.values()) == {1}, ids

        # The upkeep goes on on node-b: the reaper times out the tasks of a
        # worker session that stops beating, and the purge deletes a run its
        # retention no longer keeps.
        async with b.channel() as channel:
            await _reaper_works(sg.WorkflowServiceStub(channel))
            await _purge_works(sg.WorkflowServiceStub(channel))

        # node-a again: it reports the kill, and does not take the lease back.
        await a.start()
        assert "node.unexpected_shutdown" in a.log_path.read_text()
        listed = await via_b.list_nodes()
        by_id = {n.node_id: n for n in listed.nodes}
        assert by_id["node-a"].unexpected_shutdowns == 1
        assert by_id["node-a"].last_unexpected_shutdown is not None
        assert by_id["node-a"].status == "ready" and listed.leader == "node-b"
        assert by_id["node-b"].unexpected_shutdowns == 0

    shown = weft(b.address, "nodes")
    assert shown.returncode == 0, shown.stderr
    assert "node-b *" in shown.stdout and "leader: node-b" in shown.stdout
    assert "node-a" in shown.stdout and "1 (last" in shown.stdout
    as_json = json.loads(weft(b.address, "nodes", "--json").stdout)
    assert as_json["leader"] == "node-b"

    # A clean stop: node-b hands the lease back and is gone; node-a leads.
    b.stop()
    async with AsyncClient(a.address) as via_a:
        await wait_until(lambda: _is(via_a, "node-a"), timeout=4 * LEASE)
        gone = {n.node_id: n.status for n in (await via_a.list_nodes()).nodes}
        assert gone == {"node-a": "ready", "node-b": "gone"}


async def _started(client: AsyncClient, at_least: int) -> bool:
    return (await client.describe_schedule("tick")).started >= at_least


async def _is(client: AsyncClient, node: str) -> bool:
    return await leader_seen_by(client) == node


async def _reaper_works(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    await wf.decide(await wf.poll_decision(), schedule("a1", "work", wf.task_list))
    session = await stub.RegisterWorker(
        s.RegisterWorkerRequest(
            identity="short-lived",
            task_lists=[s.WorkerTaskList(name=wf.task_list, kind=c.TASK_LIST_KIND_ACTIVITY)],
            session_timeout=_seconds(2),
        )
    )
    task = await stub.PollForActivityTask(
        s.PollForActivityTaskRequest(
            task_list=wf.task_list,
            identity="short-lived",
            worker_session_id=session.worker_session_id,
        )
    )
    assert task.task_token

    async def lost() -> bool:
        return "ActivityTimedOut" in await wf.types()

    await wait_until(lost, timeout=10)
    [event] = [e for e in await wf.history() if e.WhichOneof("attributes") == "activity_timed_out"]
    assert event.activity_timed_out.timeout_type == "WORKER_LOST"


async def _purge_works(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    await wf.decide(await wf.poll_decision(), retention("disabled"), complete())

    async def purged() -> bool:
        try:
            await stub.DescribeWorkflow(
                s.DescribeWorkflowRequest(execution=c.WorkflowExecution(workflow_id=wf.workflow_id))
            )
        except grpc.aio.AioRpcError as exc:
            return exc.code() == grpc.StatusCode.NOT_FOUND
        return False

    await wait_until(purged, timeout=10, interval=0.1)


def _seconds(n: float) -> object:
    from google.protobuf.duration_pb2 import Duration

    d = Duration()
    d.FromTimedelta(timedelta(seconds=n))
    return d


async def test_sqlite_has_one_node_and_it_always_leads(sqlite_url: str) -> None:
    first = Server(ServerConfig(db_url=sqlite_url, listen="127.0.0.1:0", node_name="one"))
    await first.start()
    await first.stop(grace=0.1)
    # Started again under another name (a new port): it leads at once, even
    # though the lease of its earlier self might not have run out.
    second = Server(ServerConfig(db_url=sqlite_url, listen="127.0.0.1:0", node_name="two"))
    await second.start()
    try:
        assert second._leads()
        async with AsyncClient(f"127.0.0.1:{second.port}") as client:
            listed = await client.list_nodes()
        assert listed.leader == "two"
        assert {(n.node_id, n.status) for n in listed.nodes} == {("one", "gone"), ("two", "ready")}
    finally:
        await second.stop(grace=0.1)


async def test_health_says_not_serving_once_the_node_drains(sqlite_url: str) -> None:
    node = Server(ServerConfig(db_url=sqlite_url, listen="127.0.0.1:0", drain_grace=1.0))
    await node.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
        seen = [(await watch.read()).status]
        stopping = asyncio.create_task(node.stop())
        seen.append((await watch.read()).status)
        await stopping
    assert seen == [
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    ]


async def test_two_processes_given_one_name_never_both_lead(postgres_url: str) -> None:
    """One config for every replica (the same --node-name): the lease is held by
    a process, not a name, so one of them leads."""
    config = ServerConfig(
        db_url=postgres_url, listen="127.0.0.1:0", node_name="replica", lease_period=1.0
    )
    first, second = Server(config), Server(config)
    await first.start()
    await second.start()
    try:
        for _ in range(20):
            assert [first._leads(), second._leads()].count(True) <= 1
            await asyncio.sleep(0.1)
        assert first._leads() or second._leads()
    finally:
        await second.stop(grace=0.1)
        await first.stop(grace=0.1)

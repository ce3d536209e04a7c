"""Idle long polls cost the server nothing (issue 15): 5,000 of them parked on a
real `weft server` leave its CPU near idle and a workflow's latency as it was,
and past the per-client cap a poll is refused with RESOURCE_EXHAUSTED."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from bench.procstat import cpu_seconds
from sdk import ActivityWorker, AsyncClient, DeciderWorker, DecisionTask, activity
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import unique, wait_until
from tests.sdk.conftest import make_decider
from tests.serverproc import ServerProcess

IDLE_POLLS = 5000
CHANNELS = 10  # several connections, as several worker processes would open
WINDOW = 8.0  # seconds of idle polls over which the server's CPU is measured


@activity
async def echo(value: int) -> int:
    return value


def one_activity(task: DecisionTask) -> None:
    act = task.activities.get("a")
    if act is None:
        task.schedule_activity("a", echo, 1, task_list=task.input)
    elif act.status == "succeeded":
        task.complete(act.result)


async def workflow_latency(client: AsyncClient, task_list: str, runs: int = 5) -> float:
    """Median seconds from start to result of a one-activity workflow."""
    took = []
    for _ in range(runs):
        began = time.perf_counter()
        run = await client.start_workflow("latency", task_list, task_list=task_list)
        await client.result(run.workflow_id, timeout=timedelta(seconds=30))
        took.append(time.perf_counter() - began)
    return statistics.median(took)


@asynccontextmanager
async def parked_polls(address: str, n: int) -> AsyncIterator[list[asyncio.Future[object]]]:
    """`n` polls of task lists nobody feeds, opened a hundred at a time as worker
    processes would (gRPC itself cancels some of thousands of calls opened in the
    same instant on this 2-core machine, whatever the handler does)."""
    channels = [grpc.aio.insecure_channel(address) for _ in range(CHANNELS)]
    calls: list[asyncio.Future[object]] = []
    try:
        for i in range(n):
            stub = sg.WorkflowServiceStub(channels[i % CHANNELS])
            request = s.PollForActivityTaskRequest(task_list=f"idle-{i % 50}", identity=f"i{i}")
            calls.append(asyncio.ensure_future(stub.PollForActivityTask(request)))
            if i % 100 == 99:
                await asyncio.sleep(0.1)
        yield calls
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*(channel.close() for channel in channels))


async def test_five_thousand_idle_polls_leave_the_server_idle(db_url: str, tmp_path: Path) -> None:
    node = ServerProcess(
        db_url,
        tmp_path,
        long_poll="60s",
        extra_args=("--max-polls-per-client", str(IDLE_POLLS + 100), "--log-level", "warning"),
    )
    await node.start()
    assert node.proc is not None
    task_list = unique("latency")
    try:
        async with (
            AsyncClient(node.address) as client,
            DeciderWorker(
                client, task_lists=[task_list], deciders=[make_decider("latency", one_activity)]
            ),
            ActivityWorker(client, task_lists=[task_list], activities=[echo]),
        ):
            await workflow_latency(client, task_list, runs=2)  # warm up
            before = await workflow_latency(client, task_list)
            async with parked_polls(node.address, IDLE_POLLS) as calls:
                # Wait until every poll has reached the server and parked.
                await asyncio.sleep(3.0)
                assert not any(call.done() for call in calls), "a poll ended early"
                used = cpu_seconds(node.proc.pid)
                await asyncio.sleep(WINDOW)
                busy = (cpu_seconds(node.proc.pid) - used) / WINDOW
                during = await workflow_latency(client, task_list)
                assert not any(call.done() for call in calls)
    finally:
        node.stop()
    # Parked polls wait on wake-ups only: no database look each, no periodic work.
    assert busy < 0.15, f"the server used {busy:.2f} of a core with idle polls parked"
    assert during < 3 * before + 0.3, f"latency {before:.3f}s before, {during:.3f}s with polls"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_past_the_cap_a_client_is_refused_more_polls(db_url: str, tmp_path: Path) -> None:
    node = ServerProcess(
        db_url, tmp_path, long_poll="30s", extra_args=("--max-polls-per-client", "5")
    )
    await node.start()
    try:
        async with node.channel() as channel:
            stub = sg.WorkflowServiceStub(channel)
            request = s.PollForActivityTaskRequest(task_list=unique("capped"), identity="greedy")
            polls = [asyncio.ensure_future(stub.PollForActivityTask(request)) for _ in range(5)]
            await asyncio.sleep(1.0)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.PollForActivityTask(request, timeout=10)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "concurrent polls per client" in (refused.value.details() or "")
            # A poll that ends gives its place back.
            polls[0].cancel()

            async def accepted() -> bool:
                try:
                    await stub.PollForActivityTask(
                        s.PollForActivityTaskRequest(task_list=request.task_list), timeout=0.5
                    )
                except grpc.aio.AioRpcError as exc:
                    return exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                return True

            assert await wait_until(accepted)
            for poll in polls:
                poll.cancel()
    finally:
        node.stop()

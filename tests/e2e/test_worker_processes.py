"""The SDK's worker loops as real processes: `weft server`, `weft decider` and
`weft runner` subprocesses, driven through the `weft` command line and the SDK.

- the order example with its card charge routed to a runner of its own (`pci`);
- a runner killed mid-activity: the heartbeat timeout notices, the decider
  retries, another runner completes it;
- SIGTERM to a runner: it stops polling and finishes its activity first;
- a server restart under polling workers: they reconnect by themselves.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sdk import AsyncClient, Event
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from tests.helpers import unique, wait_until
from tests.serverproc import WEFT, ServerProcess
from tests.workerproc import REPO, WorkerProcess, spawn

SLOW_FLOW = str(Path(__file__).with_name("slow_flow.py"))


@pytest.fixture
async def client(node: ServerProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(node.address) as sdk_client:
        yield sdk_client


def weft(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [str(WEFT), *args, "--address", address],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 0, f"weft {' '.join(args)} -> {out.returncode}: {out.stderr}"
    return out


async def polled(client: AsyncClient, task_list: str, kind: int) -> bool:
    resp = await client.rpc(
        "DescribeTaskList",
        s.DescribeTaskListRequest(namespace="default", task_list=task_list, kind=kind),
    )
    return bool(resp.pollers)


def started_by(history: list[Event]) -> dict[str, list[str]]:
    """activity id -> the identities that started each of its attempts, in order."""
    scheduled = {e.event_id: e.get("activity_id") for e in history if e.type == "ActivityScheduled"}
    out: dict[str, list[str]] = {}
    for e in history:
        if e.type == "ActivityStarted":
            out.setdefault(scheduled[e.get("scheduled_event_id")], []).append(e.get("identity"))
    return out


async def events_of(client: AsyncClient, workflow_id: str, kind: str) -> list[Event]:
    return [e for e in await client.history(workflow_id) if e.type == kind]


async def test_order_flow_routes_the_card_charge_to_the_pci_runner(
    node: ServerProcess, client: AsyncClient, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    spawn(workers, node, tmp_path, "decider", "decider", "examples.order")
    spawn(
        workers,
        node,
        tmp_path,
        "runner",
        "orders-runner",
        "--task-list",
        "orders",
        "examples.order",
    )
    spawn(workers, node, tmp_path, "runner", "pci-runner", "--task-list", "pci", "examples.order")
    # The decider registers `order` (default task list `orders`) before it polls.
    await wait_until(lambda: polled(client, "orders", c.TASK_LIST_KIND_DECISION), timeout=30)
    await wait_until(lambda: polled(client, "pci", c.TASK_LIST_KIND_ACTIVITY), timeout=30)

    order_id = unique("order")
    order = '{"sku": "book", "quantity": 2, "amount": 25.5}'
    out = weft(node.address, "start", "order", "--id", order_id, "--input", order)
    assert order_id in out.stdout

    # Shipped, then waiting for the carrier: the signal comes from outside.
    async def shipped() -> bool:
        return any(
            e.get("result", {}).get("tracking")
            for e in await events_of(client, order_id, "ActivitySuccess")
        )

    await wait_until(shipped, timeout=30)
    weft(node.address, "signal", order_id, "delivered", "--input", '{"signed_by": "pat"}')
    result = await client.result(order_id, timeout=timedelta(seconds=30))

    assert result["delivered"] == {"signed_by": "pat"}
    assert result["charge"].startswith("CH-") and result["tracking"].startswith("TRK-")
    history = await client.history(order_id)
    assert started_by(history) == {
        "reserve": ["orders-runner"],
        "charge": ["pci-runner"],
        "ship": ["orders-runner"],
    }
    charge = next(e for e in history if e.get("activity_id") == "charge")
    assert charge.get("task_list") == "pci"
    assert history[-1].type == "WorkflowSuccess"

    # The other door: the carrier's own script (examples/carrier.py) signals an order.
    second = await client.start_workflow("order", {"sku": "pen", "quantity": 1, "amount": 2})
    carrier = subprocess.run(
        [sys.executable, "-m", "examples.carrier", second.workflow_id, "--address", node.address],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert carrier.returncode == 0, carrier.stderr
    delivered = await client.result(second.workflow_id, timeout=timedelta(seconds=30))
    assert delivered["delivered"]["carrier"] == "ACME Parcels"


async def test_a_runner_killed_mid_activity_times_out_and_the_retry_completes_elsewhere(
    node: ServerProcess, client: AsyncClient, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    tl = unique("tl")
    spawn(workers, node, tmp_path, "decider", "decider", "--task-list", tl, SLOW_FLOW)
    doomed = spawn(workers, node, tmp_path, "runner", "runner-1", "--task-list", tl, SLOW_FLOW)
    plan: dict[str, Any] = {"task_list": tl, "first": 60, "retry": 0.2}
    run = await client.start_workflow("slow-flow", plan, task_list=tl)

    async def started() -> list[Event]:
        return await events_of(client, run.workflow_id, "ActivityStarted")

    async def heartbeating() -> bool:
        pending = (await client.describe(run.workflow_id)).pending_activities
        return bool(pending) and pending[0].heartbeat_details is not None

    await wait_until(started, timeout=30)
    await wait_until(heartbeating, timeout=30)
    spawn(workers, node, tmp_path, "runner", "runner-2", "--task-list", tl, SLOW_FLOW)
    doomed.kill9()

    result = await client.result(run.workflow_id, timeout=timedelta(seconds=60))
    assert result == {"attempt": 2, "task_list": tl}
    history = await client.history(run.workflow_id)
    timed_out = [e for e in history if e.type == "ActivityTimedOut"]
    assert [e.get("timeout_type") for e in timed_out] == ["HEARTBEAT"]
    assert timed_out[0].get("details", {}).get("left", 0) > 0  # the last heartbeat's details
    assert started_by(history) == {"step": ["runner-1", "runner-2"]}


async def test_sigterm_lets_a_runner_finish_its_activity_and_stop_polling(
    node: ServerProcess, client: AsyncClient, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    tl = unique("tl")
    spawn(workers, node, tmp_path, "decider", "decider", "--task-list", tl, SLOW_FLOW)
    runner = spawn(workers, node, tmp_path, "runner", "runner-1", "--task-list", tl, SLOW_FLOW)
    first = await client.start_workflow(
        "slow-flow", {"task_list": tl, "first": 3, "retry": 0}, task_list=tl
    )

    async def started(workflow_id: str) -> list[Event]:
        return await events_of(client, workflow_id, "ActivityStarted")

    await wait_until(lambda: started(first.workflow_id), timeout=30)

    async def running() -> bool:
        # ActivityStarted is written when the poll is answered; the runner has
        # the task only once it logs it. (A SIGTERM in between still drops the
        # answer, and the task waits for its timeout to be retried: a known gap
        # of the worker's shutdown, not what this test is about.)
        return '"activity.started"' in runner.log()

    await wait_until(running, timeout=30)
    runner.sigterm()

    async def draining() -> bool:
        return '"worker.draining"' in runner.log()

    # Work offered once the runner drains (its polls are cancelled by then) is
    # not taken by it.
    await wait_until(draining, timeout=30)
    second = await client.start_workflow(
        "slow-flow", {"task_list": tl, "first": 0, "retry": 0}, task_list=tl
    )
    await wait_until(lambda: events_of(client, second.workflow_id, "ActivityScheduled"), timeout=30)

    assert await runner.wait_exit(timeout=30) == 0, runner.log_tail()
    assert await client.result(first.workflow_id, timeout=timedelta(seconds=30)) == {
        "attempt": 1,
        "task_list": tl,
    }
    success = await events_of(client, first.workflow_id, "ActivitySuccess")
    assert [e.get("identity") for e in success] == ["runner-1"]
    assert await started(second.workflow_id) == []
    assert "worker.draining" in runner.log() and "worker.stopped" in runner.log()


async def test_workers_reconnect_by_themselves_after_a_server_restart(
    node: ServerProcess, client: AsyncClient, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    tl = unique("tl")
    decider = spawn(workers, node, tmp_path, "decider", "decider", "--task-list", tl, SLOW_FLOW)
    runner = spawn(workers, node, tmp_path, "runner", "runner-1", "--task-list", tl, SLOW_FLOW)
    plan = {"task_list": tl, "first": 0.1, "retry": 0, "wait_for_go": True}
    waiting = await client.start_workflow("slow-flow", plan, task_list=tl)
    await wait_until(lambda: events_of(client, waiting.workflow_id, "ActivitySuccess"), timeout=30)
    await wait_until(lambda: polled(client, tl, c.TASK_LIST_KIND_ACTIVITY), timeout=30)

    await node.restart()  # kill -9, then the same database and port

    await client.signal(waiting.workflow_id, "go")
    fresh = await client.start_workflow("slow-flow", {**plan, "wait_for_go": False}, task_list=tl)
    assert await client.result(waiting.workflow_id, timeout=timedelta(seconds=60)) == {
        "attempt": 1,
        "task_list": tl,
    }
    assert await client.result(fresh.workflow_id, timeout=timedelta(seconds=60)) == {
        "attempt": 1,
        "task_list": tl,
    }
    assert decider.running and runner.running

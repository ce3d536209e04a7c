"""Worker sessions with real processes (README "Workers and nodes"): a runner
or a decider SIGKILLed while it holds tasks whose own timeouts are ten minutes
away; its session expires and the tasks time out at once as WORKER_LOST, with
its identity in the events, and complete on another worker. `weft workers`
shows the lost session and the live ones."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from sdk import AsyncClient, Event
from tests.helpers import unique, wait_until
from tests.serverproc import WEFT, ServerProcess
from tests.workerproc import REPO, WorkerProcess, spawn

LOST_FLOW = str(Path(__file__).with_name("lost_flow.py"))
# The server's default session timeout is 10 s; the reaper looks every second
# and the runs a session touched are written within a second of the start.
WITHIN = 15.0


@pytest.fixture
async def client(node: ServerProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(node.address) as sdk_client:
        yield sdk_client


def weft(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WEFT), *args, "--address", address],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


async def of_type(client: AsyncClient, workflow_id: str, kind: str) -> list[Event]:
    return [e for e in await client.history(workflow_id) if e.type == kind]


async def live_workers(address: str, task_list: str) -> list[dict[str, object]]:
    out = weft(address, "workers", "--task-list", task_list, "--json")
    assert out.returncode == 0, out.stderr
    return [w for w in json.loads(out.stdout) if w["status"] == "live"]


async def test_a_killed_runner_loses_its_eight_tasks_at_once_and_another_completes_them(
    node: ServerProcess, client: AsyncClient, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    tl = unique("tl")
    spawn(workers, node, tmp_path, "decider", "decider", "--task-list", tl, LOST_FLOW)
    doomed = spawn(
        workers,
        node,
        tmp_path,
        "runner",
        "runner-1",
        "--task-list",
        tl,
        "--concurrency",
        "16",
        LOST_FLOW,
    )
    await wait_until(lambda: live_workers(node.address, tl), timeout=30)
    run = await client.start_workflow("lost-flow", {"task_list": tl}, task_list=tl)

    async def eight_started() -> bool:
        return len(await of_type(client, run.workflow_id, "ActivityStarted")) == 8

    await wait_until(eight_started, timeout=30)
    started = await of_type(client, run.workflow_id, "ActivityStarted")
    assert {e.get("identity") for e in started} == {"runner-1"}
    assert all(e.get("worker_session_id") for e in started)
    doomed.kill9()
    killed = time.monotonic()

    async def eight_lost() -> bool:
        return len(await of_type(client, run.workflow_id, "ActivityTimedOut")) == 8

    await wait_until(eight_lost, timeout=WITHIN + 5)
    took = time.monotonic() - killed
    assert took <= WITHIN, f"the tasks timed out {took:.1f} s after the kill"
    timed_out = await of_type(client, run.workflow_id, "ActivityTimedOut")
    assert {e.get("timeout_type") for e in timed_out} == {"WORKER_LOST"}
    assert {e.get("identity") for e in timed_out} == {"runner-1"}
    assert {e.get("worker_session_id") for e in timed_out} == {
        e.get("worker_session_id") for e in started
    }

    spawn(workers, node, tmp_path, "runner", "runner-2", "--task-list", tl, LOST_FLOW)
    result = await client.result(run.workflow_id, timeout=timedelta(seconds=60))
    assert result == {f"step-{n}": {"attempt": 2} for n in range(8)}
    retried = (await of_type(client, run.workflow_id, "ActivityStarted"))[8:]
    assert {e.get("identity") for e in retried} == {"runner-2"}

    # `weft workers` shows runner-1 lost, and runner-2 and the decider live.
    out = weft(node.address, "workers", "--task-list", tl, "--json")
    assert out.returncode == 0, out.stderr
    shown = {(w["identity"], w["status"]) for w in json.loads(out.stdout)}
    assert shown == {("runner-1", "lost"), ("runner-2", "live"), ("decider", "live")}
    table = weft(node.address, "workers", "--task-list", tl)
    assert table.returncode == 0 and "runner-1" in table.stdout and "lost" in table.stdout


async def test_a_killed_decider_loses_its_decision_task_at_once_and_another_decides(
    node: ServerProcess, client: AsyncClient, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    tl = unique("tl")
    stuck = spawn(
        workers,
        node,
        tmp_path,
        "decider",
        "decider-1",
        "--task-list",
        tl,
        LOST_FLOW,
        env={"WEFT_TEST_BLOCK_DECIDER": "1"},
    )
    await wait_until(lambda: live_workers(node.address, tl), timeout=30)
    run = await client.start_workflow(
        "lost-flow",
        {"task_list": tl, "width": 1, "first_sleep": 0},
        task_list=tl,
        decider_timeout=timedelta(minutes=10),
    )
    await wait_until(lambda: of_type(client, run.workflow_id, "DeciderStarted"), timeout=30)
    stuck.kill9()
    killed = time.monotonic()
    await wait_until(
        lambda: of_type(client, run.workflow_id, "DeciderTimedOut"), timeout=WITHIN + 5
    )
    took = time.monotonic() - killed
    assert took <= WITHIN, f"the decision task timed out {took:.1f} s after the kill"
    [lost] = await of_type(client, run.workflow_id, "DeciderTimedOut")
    assert lost.get("timeout_type") == "WORKER_LOST"
    assert lost.get("identity") == "decider-1"

    spawn(workers, node, tmp_path, "decider", "decider-2", "--task-list", tl, LOST_FLOW)
    spawn(workers, node, tmp_path, "runner", "runner", "--task-list", tl, LOST_FLOW)
    result = await client.result(run.workflow_id, timeout=timedelta(seconds=60))
    assert result == {"step-0": {"attempt": 1}}
    deciders = [e.get("identity") for e in await of_type(client, run.workflow_id, "DeciderStarted")]
    assert deciders[0] == "decider-1" and set(deciders[1:]) == {"decider-2"}


async def test_a_clean_stop_unregisters_and_a_session_that_expired_is_refused(
    node: ServerProcess, client: AsyncClient, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    tl = unique("tl")
    runner = spawn(workers, node, tmp_path, "runner", "runner-1", "--task-list", tl, LOST_FLOW)
    await wait_until(lambda: live_workers(node.address, tl), timeout=30)
    runner.sigterm()
    assert await runner.wait_exit(timeout=30) == 0, runner.log_tail()
    out = weft(node.address, "workers", "--task-list", tl, "--json")
    [shown] = json.loads(out.stdout)
    assert shown["identity"] == "runner-1" and shown["status"] == "stopped"

    # A heartbeat of that ended session is refused: the worker registers anew.
    from sdk.api.weft.v1 import service_pb2 as s
    from sdk.errors import FailedPreconditionError, NotFoundError

    with pytest.raises(FailedPreconditionError, match="register again"):
        await client.rpc(
            "RecordWorkerHeartbeat",
            s.RecordWorkerHeartbeatRequest(worker_session_id=shown["worker_session_id"]),
        )
    with pytest.raises(NotFoundError):
        await client.rpc(
            "RecordWorkerHeartbeat", s.RecordWorkerHeartbeatRequest(worker_session_id="nope")
        )


async def test_live_workers_are_not_lost_when_the_server_was_down_longer_than_their_timeout(
    node: ServerProcess, client: AsyncClient, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    tl = unique("tl")
    spawn(workers, node, tmp_path, "decider", "decider", "--task-list", tl, LOST_FLOW)
    spawn(workers, node, tmp_path, "runner", "runner", "--task-list", tl, LOST_FLOW)
    await wait_until(lambda: live_workers(node.address, tl), timeout=30)
    run = await client.start_workflow(
        "lost-flow", {"task_list": tl, "width": 1, "first_sleep": 20}, task_list=tl
    )
    await wait_until(lambda: of_type(client, run.workflow_id, "ActivityStarted"), timeout=30)
    await asyncio.sleep(2)  # the server has written where the runner's session started tasks
    node.kill9()
    await asyncio.sleep(12)  # past the 10 s session timeout, with nobody to beat to
    await node.start()
    result = await client.result(run.workflow_id, timeout=timedelta(seconds=60))
    assert result == {"step-0": {"attempt": 1}}
    assert not await of_type(client, run.workflow_id, "ActivityTimedOut")

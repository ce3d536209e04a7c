"""`weft doctor` and the problems of `weft describe`, as a user runs them: the
real console script against a real `weft server` process, on both databases.
Exit 0 when nothing looks stuck, 5 with findings; bad input is one line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cli.doctor_cmd import EXIT_FINDINGS
from cli.errors import EXIT_NOT_FOUND, EXIT_USAGE
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.cli.support import error_line, ok, show, weft
from tests.e2e import doctor_cases as cases
from tests.helpers import unique
from tests.serverproc import ServerProcess


@pytest.fixture
async def node(db_url: str, tmp_path: Path) -> AsyncIterator[ServerProcess]:
    proc = ServerProcess(db_url, tmp_path, name="doctor", long_poll="2s")
    await proc.start()
    yield proc
    proc.stop()


@pytest.fixture
async def stub(node: ServerProcess) -> AsyncIterator[sg.WorkflowServiceStub]:
    async with node.channel() as channel:
        yield sg.WorkflowServiceStub(channel)


async def doctor(node: ServerProcess, *args: str, after: str = f"{cases.NO_POLLER_AFTER}s") -> Any:
    return await asyncio.to_thread(
        weft, "doctor", "--no-poller-after", after, *args, address=node.address
    )


def findings_of(done: Any) -> dict[str, Any]:
    """A `weft doctor --json` that found something: exit 5, one JSON document."""
    assert done.returncode == EXIT_FINDINGS, show(done)
    assert done.stderr == "", show(done)
    doc: dict[str, Any] = json.loads(done.stdout)
    assert doc["healthy"] is False
    return doc


async def test_a_healthy_namespace_exits_0(
    node: ServerProcess, stub: sg.WorkflowServiceStub
) -> None:
    namespace = unique("healthy")
    wf = await cases.started(stub, namespace)
    # A lock nobody waits for; its grant's decision task waits less than an hour.
    await cases.ask(wf, cases.request_lock(unique("free")))
    out = ok(await doctor(node, "--namespace", namespace, after="1h"))
    assert out.strip() == f"namespace {namespace!r}: nothing looks stuck"
    doc = json.loads(ok(await doctor(node, "--namespace", namespace, "--json", after="1h")))
    assert doc == {"namespace": namespace, "healthy": True, "truncated": False, "findings": []}


async def test_unpolled_tasks_and_a_blocked_lock_chain_are_found(
    node: ServerProcess, stub: sg.WorkflowServiceStub
) -> None:
    chain = await cases.lock_chain(stub)
    doc = findings_of(await doctor(node, "--json"))
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for f in doc["findings"]:
        by_kind.setdefault(f["kind"], []).append(f)
    [blocked] = by_kind["LOCK_HOLDER_BLOCKED"]
    assert blocked["lock_name"] == chain.second
    assert [(x["lock_name"], x["run_id"]) for x in blocked["chain"]] == [
        (chain.second, chain.middle.run_id),
        (chain.first, chain.holder.run_id),
    ]
    assert blocked["executions"][0] == {
        "workflow_id": chain.waiter.workflow_id,
        "run_id": chain.waiter.run_id,
    }
    [unpolled] = [f for f in by_kind["NO_POLLER"] if f["task_list"] == chain.holder.task_list]
    assert unpolled["task_list_kind"] == "decision"
    assert unpolled["executions"] == [
        {"workflow_id": chain.holder.workflow_id, "run_id": chain.holder.run_id}
    ]
    # The text: a header, then each finding with its runs and what to do.
    done = await doctor(node)
    assert done.returncode == EXIT_FINDINGS and done.stderr == "", show(done)
    assert done.stdout.startswith("namespace 'default': ")
    assert f"LOCK_HOLDER_BLOCKED  1 run waits for lock {chain.second!r}" in done.stdout
    assert f"chain   {chain.second!r} held by {chain.middle.workflow_id}" in done.stdout
    assert f"do      start a decider polling {chain.holder.task_list!r}" in done.stdout


async def test_a_deadlock_is_found_and_shown_by_describe(
    node: ServerProcess, stub: sg.WorkflowServiceStub
) -> None:
    one, two, lock_a, lock_b = await cases.deadlock(stub)
    doc = findings_of(await doctor(node, "--json"))
    [found] = [f for f in doc["findings"] if f["kind"] == "LOCK_DEADLOCK"]
    assert {e["run_id"] for e in found["executions"]} == {one.run_id, two.run_id}
    assert {x["lock_name"] for x in found["chain"]} == {lock_a, lock_b}
    described = await asyncio.to_thread(weft, "describe", one.workflow_id, address=node.address)
    out = ok(described)
    assert "problems (weft doctor):" in out and "LOCK_DEADLOCK  runs wait for" in out
    as_json = await asyncio.to_thread(
        weft, "describe", two.workflow_id, "--json", address=node.address
    )
    [problem] = json.loads(ok(as_json))["problems"]
    assert problem["kind"] == "LOCK_DEADLOCK"


async def test_bad_input_is_one_line(node: ServerProcess, stub: sg.WorkflowServiceStub) -> None:
    await cases.started(stub)  # the default namespace is in use
    unknown = await asyncio.to_thread(
        weft, "doctor", "--namespace", unique("never-used"), address=node.address
    )
    assert "not registered" in error_line(unknown, "doctor", EXIT_NOT_FOUND)
    negative = await asyncio.to_thread(
        weft, "doctor", "--no-poller-after", "-5s", address=node.address
    )
    assert "invalid duration" in error_line(negative, "doctor", EXIT_USAGE)
    zero = await asyncio.to_thread(weft, "doctor", "--no-poller-after", "0s", address=node.address)
    assert "no_poller_after" in error_line(zero, "doctor", EXIT_USAGE)

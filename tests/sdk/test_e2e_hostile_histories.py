"""Histories that used to wedge a run (issue 15): pages of large payloads are
bounded in bytes and read by deciders, clients and the CLI; a history a decider
cannot decode is reported as a failed decision task, shown by `describe`, and
read by clients with the bad payload marked, while the decider goes on serving
other runs."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from orchestrator.api.common import HISTORY_PAGE_BYTES
from orchestrator.engine import external
from orchestrator.engine.limits import Limits
from orchestrator.server import MAX_MESSAGE, Server
from sdk import AsyncClient, DeciderWorker, DecisionTask, UndecodablePayload
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.client import MAX_MESSAGE_BYTES
from tests.helpers import wait_until
from tests.sdk.conftest import make_decider, only, types
from tests.serverproc import WEFT

CHUNK = 250 * 1024 - 16  # a JSON string just under the 256 KiB payload limit
CHUNKS = 20
WAIT = timedelta(seconds=30)


def test_clients_receive_what_the_server_may_send() -> None:
    assert MAX_MESSAGE_BYTES == MAX_MESSAGE


def count_chunks(task: DecisionTask) -> None:
    chunks = task.signals("chunk")
    if len(chunks) == CHUNKS:
        task.complete(sum(len(sig.input) for sig in chunks))


async def test_a_history_of_large_payloads_is_decided_and_read(
    client: AsyncClient, task_list: str, server: Server
) -> None:
    run = await client.start_workflow("chunks", task_list=task_list)
    for i in range(CHUNKS):
        await client.signal(run.workflow_id, "chunk", chr(ord("a") + i) * CHUNK)
    # Over 5 MB of history: past gRPC's default 4 MiB for one message.
    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("chunks", count_chunks)]
    ):
        assert await client.result(run.workflow_id, timeout=WAIT) == CHUNKS * CHUNK

    events = await client.history(run.workflow_id)
    signals = [e for e in events if e.type == "Signal"]
    assert [sig.get("input")[0] for sig in signals] == [chr(ord("a") + i) for i in range(CHUNKS)]

    # Each page the server sends stays within its byte bound (or is one event alone).
    token, pages = b"", 0
    while True:
        page = await client.rpc(
            "GetWorkflowHistory",
            s.GetWorkflowHistoryRequest(
                execution=c.WorkflowExecution(workflow_id=run.workflow_id),
                next_page_token=token,
            ),
        )
        pages += 1
        sizes = [e.ByteSize() for e in page.events]
        assert sum(sizes) <= HISTORY_PAGE_BYTES or len(sizes) == 1, sizes
        token = page.next_page_token
        if not token:
            break
    assert pages >= 3

    # The command line reads it too (a process of its own; the server is on this loop).
    proc = await asyncio.create_subprocess_exec(
        str(WEFT),
        "history",
        run.workflow_id,
        "--json",
        "--address",
        client.address,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    doc = json.loads(out)
    assert [e["type"] for e in doc["events"]].count("Signal") == CHUNKS


async def legacy_signal(server: Server, run_id: str, data: bytes) -> None:
    """Append a signal whose payload is not JSON, as runs written before the
    service checked payloads may hold: straight through the store."""
    bad = c.Payload(data=data, encoding="json")
    store = server._store
    assert store is not None
    await store.transact(run_id, lambda t: external.signal(t, "legacy", bad, "old", Limits()))


async def test_an_undecodable_history_is_reported_not_a_wedged_decider(
    client: AsyncClient, task_list: str, server: Server
) -> None:
    def decide(task: DecisionTask) -> None:
        task.complete(len(task.history))

    worker = DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("legacy", decide)]
    )
    poisoned = await client.start_workflow("legacy", task_list=task_list)
    await legacy_signal(server, poisoned.run_id, b"\xff{not json")
    async with worker:

        async def parked() -> Any:
            described = await client.describe(poisoned.workflow_id)
            return described if described.decider_attempt >= 3 else None

        described = await wait_until(parked)
        # The same decider goes on deciding other runs meanwhile.
        healthy = await client.start_workflow("legacy", task_list=task_list)
        assert await client.result(healthy.workflow_id, timeout=WAIT) == 3

    assert described.decider_state == "retrying"
    assert described.decider_failure.startswith("UNDECODABLE_HISTORY: event 3 (Signal)")
    events = await client.history(poisoned.workflow_id)
    failed = only(events, "DeciderFailed")
    assert failed.get("cause") == "UNDECODABLE_HISTORY"
    assert "not UTF-8" in failed.get("details")["message"]
    assert "DeciderTimedOut" not in types(events)
    # A client reads the run, the bad payload marked and kept as its bytes.
    marker = only(events, "Signal").get("input")
    assert isinstance(marker, UndecodablePayload)
    assert marker.data == b"\xff{not json"
    assert "undecodable" in str(marker)
    # The operator can act on it.
    await client.terminate(poisoned.workflow_id, reason="legacy payload")
    assert (await client.describe(poisoned.workflow_id)).status == "terminated"

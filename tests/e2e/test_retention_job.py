"""The server's own retention job: a `weft server` started with a short
`--purge-interval` deletes a closed run its policy no longer keeps, by itself,
and keeps the rest."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, wait_until
from tests.serverproc import ServerProcess


@pytest.fixture
async def purging_node(db_url: str, tmp_path: Path) -> AsyncIterator[ServerProcess]:
    proc = ServerProcess(db_url, tmp_path, name="purger", extra_args=("--purge-interval", "200ms"))
    await proc.start()
    yield proc
    proc.stop()


def retention(policy: str) -> d.Decision:
    details = c.Payload(data=json.dumps({"retention": policy}).encode(), encoding="json")
    return d.Decision(
        record_marker=d.RecordMarkerDecision(marker_name="retention", details=details)
    )


async def test_the_server_purges_on_its_own(purging_node: ServerProcess) -> None:
    async with purging_node.channel() as channel:
        stub = sg.WorkflowServiceStub(channel)
        gone, stays = Driver(stub), Driver(stub)
        for wf, policy in ((gone, "disabled"), (stays, "forever")):
            await wf.start()
            await wf.decide(await wf.poll_decision(), retention(policy), complete())

        async def purged() -> bool:
            try:
                await stub.DescribeWorkflow(
                    s.DescribeWorkflowRequest(
                        execution=c.WorkflowExecution(workflow_id=gone.workflow_id)
                    )
                )
            except grpc.aio.AioRpcError as exc:
                return exc.code() == grpc.StatusCode.NOT_FOUND
            return False

        await wait_until(purged, timeout=30, interval=0.1)
        assert (await stays.types())[-1] == "WorkflowSuccess"
    assert "retention.purged" in purging_node.log_path.read_text()

"""Calls to a node from its own process (`Server.in_process()`, the transport of
`weft server --embed`) behave as the same calls over gRPC: the same refusals
with the same codes, the guard in front, a timed-out poll that takes nothing
with it. A real node on both databases, its gRPC port used for comparison."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from orchestrator.config import ServerConfig
from orchestrator.server import Server
from sdk import AsyncClient
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from sdk.errors import NotFoundError, UnauthenticatedError
from tests.helpers import unique


def bad_start() -> s.StartWorkflowRequest:
    return s.StartWorkflowRequest(
        namespace="default",
        workflow_id="",  # required
        workflow_type=c.WorkflowType(name="t"),
        task_list="tl",
        request_id=unique("req"),
    )


async def refusal(
    call: object, request: object, timeout: float = 10
) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(request, timeout=timeout)  # type: ignore[operator]
    return caught.value.code(), caught.value.details() or ""


async def test_a_refusal_is_the_same_as_over_grpc(
    server: Server, stub: sg.WorkflowServiceStub
) -> None:
    local = server.in_process().workflow
    over_grpc = await refusal(stub.StartWorkflow, bad_start())
    in_process = await refusal(local.StartWorkflow, bad_start())
    assert in_process == over_grpc
    assert in_process[0] == grpc.StatusCode.INVALID_ARGUMENT


async def test_the_sdk_maps_an_in_process_refusal_to_its_error(server: Server) -> None:
    async with AsyncClient("in-process", in_process=server.in_process()) as client:
        with pytest.raises(NotFoundError):
            await client.describe(unique("missing"))


async def test_a_poll_past_its_deadline_takes_no_task_with_it(server: Server) -> None:
    local = server.in_process().workflow
    task_list = unique("tl")
    poll = s.PollForDecisionTaskRequest(task_list=task_list, identity="in-process-test")
    # Shorter than the node's long poll (3 s): the caller's deadline ends it.
    code, _ = await refusal(local.PollForDecisionTask, poll, timeout=0.3)
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    async with AsyncClient("in-process", in_process=server.in_process()) as client:
        run = await client.start_workflow("t", None, task_list=task_list)
    task = await local.PollForDecisionTask(poll, timeout=10)
    assert task.workflow_execution.run_id == run.run_id, "the expired poll took the task"


async def test_calls_before_the_node_starts_are_refused(server_config: ServerConfig) -> None:
    services = Server(server_config).in_process()
    with pytest.raises(RuntimeError, match="has not started"):
        services.workflow.StartWorkflow  # noqa: B018 (the lookup is what is refused)


@pytest.fixture
async def auth_server(db_url: str) -> AsyncIterator[Server]:
    node = Server(ServerConfig(db_url=db_url, listen="127.0.0.1:0", long_poll=3.0, auth=True))
    await node.start()
    yield node
    await node.stop(grace=0.5)


async def test_an_in_process_call_passes_the_guard(auth_server: Server) -> None:
    async with AsyncClient("in-process", in_process=auth_server.in_process()) as client:
        with pytest.raises(UnauthenticatedError):
            await client.describe(unique("any"))

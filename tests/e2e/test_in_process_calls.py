"""Calls to a node from its own process (`Server.in_process()`, the transport of
`weft server --embed`) behave as the same calls over gRPC: the same refusals
with the same codes, the guard in front, a timed-out poll that takes nothing
with it, and a cancelled caller cancelled even when its handler finishes. A real
node on both databases, its gRPC port used for comparison; a stand-in servicer
for the cancellations."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from orchestrator.api.in_process import InProcessStub
from orchestrator.auth.gate import Caller, embedded_workers
from orchestrator.auth.grants import ADMIN, Grant
from orchestrator.config import ServerConfig
from orchestrator.server import Server
from sdk import AsyncClient
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from sdk.errors import NotFoundError, PermissionDeniedError, UnauthenticatedError
from tests.e2e.security.auth_matrix_setup import parked
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
    assert isinstance(task, s.PollForDecisionTaskResponse)
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


async def test_calls_admitted_as_the_embedded_workers_are_a_worker_of_their_lists(
    auth_server: Server,
) -> None:
    """What `weft server --embed … --auth` gives its workers: a worker of the
    `default` namespace narrowed to their lists, whose waiting poll is still
    handed its task after the node forgot every credential it had read (as it
    does when its link to the other nodes is remade)."""
    workers = auth_server.in_process()
    workers.admit_as(embedded_workers("default", ["tl-a"]))
    admin = auth_server.in_process()
    admin.admit_as(Caller("test:admin", (Grant("default", ADMIN),)))
    poll = s.PollForDecisionTaskRequest(namespace="default", task_list="tl-a", identity="w")
    async with AsyncClient("in-process", in_process=workers) as worker:
        with pytest.raises(PermissionDeniedError, match="role 'worker' may not call"):
            await worker.start_workflow("t", task_list="tl-a")
    other_list = s.PollForDecisionTaskRequest(namespace="default", task_list="tl-b")
    code, details = await refusal(workers.workflow.PollForDecisionTask, other_list)
    assert code == grpc.StatusCode.PERMISSION_DENIED, details
    waiting = asyncio.ensure_future(workers.workflow.PollForDecisionTask(poll, timeout=10))
    await parked(auth_server, "decision", "tl-a")
    assert auth_server.guard is not None
    auth_server.guard.forget_all()
    async with AsyncClient("in-process", in_process=admin) as starter:
        run = await starter.start_workflow("t", workflow_id=unique("embedded"), task_list="tl-a")
    task = await waiting
    assert task.task_token and task.workflow_execution.workflow_id == run.workflow_id
    history = await admin.workflow.GetWorkflowHistory(
        s.GetWorkflowHistoryRequest(namespace="default", execution=task.workflow_execution)
    )
    by_type = {e.type: e.principal for e in history.events}
    assert by_type["WorkflowStarted"] == "test:admin"
    assert by_type["DeciderStarted"] == f"embedded:{socket.gethostname()}"


class Stubborn:
    """Every method a handler that, cancelled, finishes anyway (as the store sees
    a write it already sent through)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.finished = False

    def __getattr__(self, name: str) -> Any:
        async def handler(request: Any, context: Any) -> s.DescribeWorkflowResponse:
            self.entered.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(10)
            self.finished = True
            return s.DescribeWorkflowResponse()

        return handler


def stubborn_stub(servicer: Stubborn) -> InProcessStub:
    return InProcessStub(servicer, s.DESCRIPTOR.services_by_name["WorkflowService"])


async def test_a_cancelled_caller_stays_cancelled_when_the_handler_finishes() -> None:
    servicer = Stubborn()
    call = asyncio.create_task(
        stubborn_stub(servicer).DescribeWorkflow(s.DescribeWorkflowRequest(namespace="default"))
    )
    await servicer.entered.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert servicer.finished  # (the handler did go on: its answer was dropped)


async def test_a_deadline_the_handler_outlives_leaves_the_caller_uncancelled() -> None:
    servicer = Stubborn()
    request = s.DescribeWorkflowRequest(namespace="default")
    response = await stubborn_stub(servicer).DescribeWorkflow(request, timeout=0.05)
    assert isinstance(response, s.DescribeWorkflowResponse)
    me = asyncio.current_task()
    assert me is not None and me.cancelling() == 0
    await asyncio.sleep(0)  # and nothing is left to cancel this task later

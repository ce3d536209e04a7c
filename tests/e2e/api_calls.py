"""Calls and decisions shared by the WorkflowService API tests (tests/e2e/test_api*.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable

import grpc
import pytest

from orchestrator.config import ServerConfig
from orchestrator.server import Server
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, dur


@contextlib.asynccontextmanager
async def serving(config: ServerConfig) -> AsyncIterator[sg.WorkflowServiceStub]:
    """A node of its own, set up by `config`, and a stub on it (a test whose
    server differs from the `server` fixture's)."""
    node = Server(config)
    await node.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
            yield sg.WorkflowServiceStub(channel)
    finally:
        await node.stop(grace=0.5)


async def refused(call: Awaitable[object], code: grpc.StatusCode) -> str:
    """Await a call that must fail with `code`; return its message."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    return info.value.details() or ""


def execution(wf: Driver, run_id: str = "") -> c.WorkflowExecution:
    return c.WorkflowExecution(workflow_id=wf.workflow_id, run_id=run_id)


async def describe(wf: Driver, run_id: str = "") -> s.DescribeWorkflowResponse:
    return await wf.stub.DescribeWorkflow(
        s.DescribeWorkflowRequest(execution=execution(wf, run_id))
    )


async def signal(wf: Driver, name: str = "go") -> None:
    await wf.stub.SignalWorkflow(
        s.SignalWorkflowRequest(execution=execution(wf), signal_name=name, identity="ops")
    )


async def task_list(
    stub: sg.WorkflowServiceStub, name: str, kind: c.TaskListKind = c.TASK_LIST_KIND_DECISION
) -> s.DescribeTaskListResponse:
    return await stub.DescribeTaskList(s.DescribeTaskListRequest(task_list=name, kind=kind))


def timer(timer_id: str, seconds: float) -> d.Decision:
    return d.Decision(
        start_timer=d.StartTimerDecision(timer_id=timer_id, start_to_fire_timeout=dur(seconds))
    )

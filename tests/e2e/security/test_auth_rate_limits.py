"""A caller over its request rate (`max_requests_per_principal`) is refused with
RESOURCE_EXHAUSTED and told when to come back (`weft-retry-after-ms`); the SDK
waits that long and sends the call again, so a busy worker's answer is taken
late instead of lost, and a decider never records the refusal as its
decisions' fault (`BAD_DECISIONS`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta

import grpc
import pytest

from orchestrator.config import ServerConfig
from orchestrator.server import Server
from sdk import AsyncClient, Decider, DeciderWorker, DecisionTask
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from sdk.errors import (
    RETRY_AFTER_METADATA,
    PermissionDeniedError,
    ResourceExhaustedError,
)
from sdk.retry import RetryPolicy
from tests.e2e.security import auth_matrix_setup
from tests.e2e.security.auth_matrix_setup import Setup, parked
from tests.helpers import rpc_calls
from tests.sdk.conftest import make_decider, types

RATE = 2.0  # requests per second per principal; the bucket holds two seconds' worth
NO_RETRIES = RetryPolicy(give_up_after=timedelta(0))

server_config = auth_matrix_setup.server_config


@pytest.fixture
async def limited(
    server_config: ServerConfig, request: pytest.FixtureRequest
) -> AsyncIterator[Setup]:
    """A server that lets each principal RATE requests a second (and, with the
    `max_polls` marker, only so many polls waiting at once)."""
    marker = request.node.get_closest_marker("max_polls")
    polls = int(marker.args[0]) if marker else server_config.max_polls_per_principal
    node = Server(
        replace(server_config, max_requests_per_principal=RATE, max_polls_per_principal=polls)
    )
    await node.start()
    try:
        it = Setup(node)
        await it.make_keys()
        yield it
    finally:
        await node.stop(grace=0.5)


def refusals(server: Server, method: str) -> float:
    """The calls of `method` the server refused with RESOURCE_EXHAUSTED."""
    return rpc_calls(server, method, "RESOURCE_EXHAUSTED")


def client(setup: Setup, who: str, retry: RetryPolicy | None = None) -> AsyncClient:
    address = f"127.0.0.1:{setup.server.port}"
    if retry is None:
        return AsyncClient(address, api_key=setup.keys[who])
    return AsyncClient(address, api_key=setup.keys[who], retry=retry)


async def drain(setup: Setup, who: str) -> None:
    """Spend `who`'s bucket to its last token and the one after: its next
    request is then refused for its rate for about 1 / RATE seconds."""
    async with client(setup, who, NO_RETRIES) as spender:

        async def spend() -> ResourceExhaustedError | None:
            try:
                await spender.rpc("ListWorkflows", s.ListWorkflowsRequest(namespace="default"))
            except PermissionDeniedError:
                pass  # (refused calls count against the rate too)
            except ResourceExhaustedError as exc:
                return exc
            return None

        for _ in range(100):
            refused = await spend()
            if refused is None:
                continue
            # What is left is a fraction of a token, which may be whole in a
            # moment: wait for it and spend it too.
            assert refused.retry_after is not None
            await asyncio.sleep(refused.retry_after.total_seconds())
            while await spend() is not None:
                await asyncio.sleep(0.01)
            return
    raise AssertionError(f"{who} was never refused for its rate")


def draining_decider(setup: Setup, drained: list[int]) -> Decider:
    """Completes its run with "done"; at its first task, first spends the
    worker key's whole bucket (noted in `drained`), so its answer is refused."""

    async def decide(task: DecisionTask) -> None:
        if not drained:
            drained.append(1)
            await drain(setup, "worker")
        task.complete("done")

    return make_decider("wt-rate", decide)


@pytest.mark.long_poll(1)
@pytest.mark.max_polls(1)
async def test_a_rate_refusal_says_when_to_come_back(limited: Setup) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{limited.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        refused = None
        for _ in range(40):
            try:
                await stub.ListWorkflows(
                    s.ListWorkflowsRequest(namespace="default"), metadata=limited.metadata("reader")
                )
            except grpc.aio.AioRpcError as exc:
                refused = exc
                break
        assert refused is not None and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        pushback = dict(trailers(refused))[RETRY_AFTER_METADATA]
        # Less than one request's worth of refill at RATE, in whole milliseconds.
        assert 1 <= int(pushback) <= 1000 / RATE

        # A limit that waiting does not lift says nothing of the kind: here,
        # one poll waiting at a time per principal.
        poll = s.PollForActivityTaskRequest(namespace="default", task_list="quiet")
        first = stub.PollForActivityTask(poll, metadata=limited.metadata("worker"))
        await parked(limited.server, "activity", "quiet")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.PollForActivityTask(poll, metadata=limited.metadata("worker"))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "polls waiting" in (info.value.details() or "")
        assert RETRY_AFTER_METADATA not in dict(trailers(info.value))
        await first


def trailers(exc: grpc.aio.AioRpcError) -> list[tuple[str, str | bytes]]:
    return [(str(k), v) for k, v in exc.trailing_metadata() or ()]


async def test_the_client_waits_out_its_rate(limited: Setup) -> None:
    async with client(limited, "reader") as reader:
        # One and a half buckets: the calls past it are refused, then sent again.
        for _ in range(int(3 * RATE)):
            await reader.list()
    assert refusals(limited.server, "ListWorkflows") >= 1

    # With no retries left, the error carries the server's hint.
    await drain(limited, "reader")
    async with client(limited, "reader", NO_RETRIES) as impatient:
        with pytest.raises(ResourceExhaustedError) as info:
            await impatient.list()
    assert info.value.retry_after is not None
    assert timedelta(0) < info.value.retry_after <= timedelta(seconds=1 / RATE)

    # A call sent once (`retried=False`: a worker's stop, say) is not held back.
    await drain(limited, "reader")
    before = refusals(limited.server, "ListWorkflows")
    async with client(limited, "reader") as patient:
        with pytest.raises(ResourceExhaustedError):
            await patient.rpc(
                "ListWorkflows", s.ListWorkflowsRequest(namespace="default"), retried=False
            )
    assert refusals(limited.server, "ListWorkflows") == before + 1


async def test_a_busy_decider_is_answered_late_not_refused(limited: Setup) -> None:
    """The decider spends its key's whole bucket while deciding: its answer is
    refused for the rate, sent again after the wait, and taken."""
    drained: list[int] = []
    decider = draining_decider(limited, drained)

    async with (
        client(limited, "worker") as worker,
        client(limited, "admin") as admin,
        DeciderWorker(worker, task_lists=["tl-rate"], deciders=[decider], concurrency=1),
    ):
        run = await admin.start_workflow("wt-rate", task_list="tl-rate")
        assert await admin.result(run.workflow_id, timeout=timedelta(seconds=20)) == "done"
        history = types(await admin.history(run.workflow_id))
    assert drained
    assert "DeciderFailed" not in history and "DeciderTimedOut" not in history
    assert refusals(limited.server, "RespondDecisionTaskCompleted") >= 1


async def test_a_decider_out_of_retries_does_not_blame_its_decisions(limited: Setup) -> None:
    """With no retries, the refused answer is left for the server to time out
    and retry: no `RespondDecisionTaskFailed(BAD_DECISIONS)` is sent."""
    drained: list[int] = []
    decider = draining_decider(limited, drained)

    async with (
        client(limited, "worker", NO_RETRIES) as worker,
        client(limited, "admin") as admin,
        DeciderWorker(worker, task_lists=["tl-rate"], deciders=[decider], concurrency=1),
    ):
        run = await admin.start_workflow(
            "wt-rate", task_list="tl-rate", decider_timeout=timedelta(seconds=1)
        )
        assert await admin.result(run.workflow_id, timeout=timedelta(seconds=20)) == "done"
        history = types(await admin.history(run.workflow_id))
    assert refusals(limited.server, "RespondDecisionTaskCompleted") >= 1
    assert rpc_calls(limited.server, "RespondDecisionTaskFailed") == 0
    assert "DeciderFailed" not in history
    assert history.count("DeciderTimedOut") == 1

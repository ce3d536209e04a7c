"""Authentication end to end, beyond the matrix (test_auth_matrix.py): a refused
start or terminate changes nothing, events record the principal next to the
identity, keys are stored only as keyed hashes, request rate and waiting polls are
limited per principal, a task handed to a waiting poll is started by that poller
and never by a revoked key, signal-with-start checks the open run's type, and a
poll folded into an answer is held to the grant and the poll limit as a poll is."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import grpc
import pytest

from orchestrator.auth import keys
from orchestrator.config import ServerConfig
from orchestrator.server import Server
from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.e2e.security import auth_matrix_setup
from tests.e2e.security.auth_matrix_setup import (
    CALLERS,
    DENIED,
    NOT_FOUND,
    OK,
    UNAUTH,
    WF,
    Setup,
    parked,
)
from tests.helpers import complete, wait_until

# The fixtures the tests below take, bound here so that pytest finds them in this
# module (a conftest would hand them to every test of the folder).
server_config = auth_matrix_setup.server_config
setup = auth_matrix_setup.setup


async def test_a_refused_start_opens_no_run(setup: Setup) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        for who in ("reader", "signaler", "worker", "starter-other-ns", "none"):
            request = s.StartWorkflowRequest(
                namespace="default",
                workflow_id=f"never-{who}",
                workflow_type=c.WorkflowType(name="wt"),
                task_list="tl-a",
            )
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.StartWorkflow(request, metadata=setup.metadata(who))
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.DescribeWorkflow(
                    s.DescribeWorkflowRequest(
                        namespace="default",
                        execution=c.WorkflowExecution(workflow_id=request.workflow_id),
                    ),
                    metadata=setup.metadata("admin"),
                )
            assert info.value.code() == NOT_FOUND


async def test_terminate_is_refused_to_every_role_but_admin(setup: Setup) -> None:
    """With the real target (the open run): refused, and the run stays open and unchanged."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        request = s.TerminateWorkflowRequest(
            namespace="default", execution=c.WorkflowExecution(workflow_id=WF)
        )
        before = await setup.history_length()
        for who in ("worker", "starter", "signaler", "reader", "admin-other-ns"):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.TerminateWorkflow(request, metadata=setup.metadata(who))
            assert info.value.code() == DENIED, who
        assert await setup.history_length() == before
        await stub.TerminateWorkflow(request, metadata=setup.metadata("admin"))
        assert await setup.history_length() == before + 1


async def test_events_record_the_principal_next_to_the_identity(setup: Setup) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        await stub.SignalWorkflow(
            s.SignalWorkflowRequest(
                namespace="default",
                execution=c.WorkflowExecution(workflow_id=WF),
                signal_name="go",
                identity="pretending-to-be-someone-else",
            ),
            metadata=setup.metadata("signaler"),
        )
        history = await stub.GetWorkflowHistory(
            s.GetWorkflowHistoryRequest(
                namespace="default", execution=c.WorkflowExecution(workflow_id=WF)
            ),
            metadata=setup.metadata("reader"),
        )
        described = await stub.DescribeWorkflow(
            s.DescribeWorkflowRequest(
                namespace="default", execution=c.WorkflowExecution(workflow_id=WF)
            ),
            metadata=setup.metadata("reader"),
        )
    assert described.started_by == f"key:{setup.keys['admin'].split('.')[1]}"
    signal = [e for e in history.events if e.type == "Signal"][-1]
    key_id = setup.keys["signaler"].split(".")[1]
    assert signal.principal == f"key:{key_id}"
    assert signal.signal.identity == "pretending-to-be-someone-else"
    first = history.events[0]
    assert first.principal == f"key:{setup.keys['admin'].split('.')[1]}"


async def test_keys_are_stored_only_as_keyed_hashes(setup: Setup) -> None:
    store = setup.server._store
    assert store is not None
    rows = await store.credentials.find(None)
    dump = json.dumps([r.secret_hash for r in rows])
    for who in CALLERS:
        secret = setup.keys[who].split(".")[2]
        assert secret not in dump
        assert keys.keyed_hash(await store.credentials.auth_secret(), secret) in dump


@pytest.mark.long_poll(1)
async def test_request_rate_and_polls_per_principal(server_config: ServerConfig) -> None:
    node = Server(replace(server_config, max_requests_per_principal=5, max_polls_per_principal=1))
    await node.start()
    try:
        it = Setup(node)
        await it.make_keys()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
            stub = sg.WorkflowServiceStub(channel)
            # A bucket of two seconds' worth (10 requests), then RESOURCE_EXHAUSTED...
            codes = []
            for _ in range(14):
                try:
                    await stub.ListWorkflows(
                        s.ListWorkflowsRequest(namespace="default"), metadata=it.metadata("reader")
                    )
                    codes.append(OK)
                except grpc.aio.AioRpcError as exc:
                    codes.append(exc.code())
            assert codes[:10] == [OK] * 10
            assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes[10:]
            # ...for that principal only.
            await stub.ListWorkflows(
                s.ListWorkflowsRequest(namespace="default"), metadata=it.metadata("starter")
            )
            # One poll waiting at a time per principal: a second is refused at once.
            poll = s.PollForActivityTaskRequest(namespace="default", task_list="quiet")
            first = asyncio.ensure_future(
                stub.PollForActivityTask(poll, metadata=it.metadata("worker"))
            )
            await parked(node, "activity", "quiet")
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.PollForActivityTask(poll, metadata=it.metadata("worker"))
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "polls waiting" in (info.value.details() or "")
            await first  # the first poll answers empty at the end of its long poll
            await stub.PollForActivityTask(poll, metadata=it.metadata("worker"))
    finally:
        await node.stop(grace=0.5)


@pytest.mark.long_poll(10)
async def test_a_task_handed_to_a_waiting_poll_is_started_by_the_poller(setup: Setup) -> None:
    """The start's commit hands the decision task to the parked poll: DeciderStarted
    is appended in the starter's write, but the worker started it."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        poll = asyncio.ensure_future(
            stub.PollForDecisionTask(
                s.PollForDecisionTaskRequest(namespace="default", task_list="handed"),
                metadata=setup.metadata("worker"),
                timeout=10,
            )
        )
        await parked(setup.server, "decision", "handed")
        await stub.StartWorkflow(
            s.StartWorkflowRequest(
                namespace="default",
                workflow_id="handed-over",
                workflow_type=c.WorkflowType(name="wt"),
                task_list="handed",
            ),
            metadata=setup.metadata("starter"),
        )
        task = await poll
        assert task.task_token
        history = await stub.GetWorkflowHistory(
            s.GetWorkflowHistoryRequest(
                namespace="default", execution=c.WorkflowExecution(workflow_id="handed-over")
            ),
            metadata=setup.metadata("reader"),
        )
    by_type = {e.type: e.principal for e in history.events}
    key_of = {who: f"key:{setup.keys[who].split('.')[1]}" for who in ("worker", "starter")}
    assert by_type["WorkflowStarted"] == key_of["starter"]
    assert by_type["DeciderStarted"] == key_of["worker"]


@pytest.mark.long_poll(10)
async def test_a_waiting_poll_of_a_revoked_key_is_handed_nothing(setup: Setup) -> None:
    """Revoked while its poll waits: the task is not started by it, and waits for
    another worker."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        admin = ag.AdminServiceStub(channel)
        request = s.PollForDecisionTaskRequest(namespace="default", task_list="revoked-list")
        poll = asyncio.ensure_future(
            stub.PollForDecisionTask(request, metadata=setup.metadata("worker"), timeout=10)
        )
        await parked(setup.server, "decision", "revoked-list")
        worker_id = setup.keys["worker"].split(".")[1]
        await admin.RevokeCredential(
            a.RevokeCredentialRequest(id=worker_id), metadata=setup.metadata("admin")
        )
        await stub.StartWorkflow(
            s.StartWorkflowRequest(
                namespace="default",
                workflow_id="for-the-revoked",
                workflow_type=c.WorkflowType(name="wt"),
                task_list="revoked-list",
            ),
            metadata=setup.metadata("starter"),
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await poll
        assert info.value.code() == UNAUTH, info.value.details()
        other = await stub.PollForDecisionTask(request, metadata=setup.metadata("admin"))
        assert other.task_token
        started = [e for e in other.events if e.type == "DeciderStarted"]
        assert [e.principal for e in started] == [f"key:{setup.keys['admin'].split('.')[1]}"]


async def test_signal_with_start_on_an_open_run_of_another_type_is_refused(setup: Setup) -> None:
    """A starter narrowed to type "x" names type "x", but the open run is a "wt"."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        before = await setup.history_length()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.SignalWithStartWorkflow(
                s.SignalWithStartWorkflowRequest(
                    start=s.StartWorkflowRequest(
                        namespace="default",
                        workflow_id=WF,
                        workflow_type=c.WorkflowType(name="x"),
                        task_list="tl-a",
                    ),
                    signal_name="go",
                ),
                metadata=setup.metadata("starter-other-type"),
            )
        assert info.value.code() == DENIED, info.value.details()
        assert await setup.history_length() == before


async def test_a_folded_poll_is_checked_against_the_grant_before_the_answer(
    setup: Setup,
) -> None:
    """A worker narrowed to tl-b may answer its task, but not fold a poll of
    tl-a into the answer: PERMISSION_DENIED before the answer is looked at."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)

        def answer(poll_list: str) -> s.RespondActivityTaskCompletedRequest:
            return s.RespondActivityTaskCompletedRequest(
                task_token=setup.token("activity", "tl-b"),
                next_poll=s.PollForActivityTaskRequest(namespace="default", task_list=poll_list),
            )

        codes = []
        for poll_list in ("tl-a", "tl-b"):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.RespondActivityTaskCompleted(
                    answer(poll_list), metadata=setup.metadata("worker-tl-b")
                )
            codes.append(info.value.code())
        # tl-b is the worker's own: let through, the (never started) task is NOT_FOUND.
        assert codes == [DENIED, NOT_FOUND]


@pytest.mark.long_poll(10)
async def test_a_folded_poll_past_the_principals_poll_limit_leaves_the_answer_standing(
    server_config: ServerConfig,
) -> None:
    node = Server(replace(server_config, max_polls_per_principal=1))
    await node.start()
    try:
        it = Setup(node)
        await it.make_keys()
        worker = it.metadata("worker")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
            stub = sg.WorkflowServiceStub(channel)
            for workflow_id in ("limited", "limited-next"):
                await stub.StartWorkflow(
                    s.StartWorkflowRequest(
                        namespace="default",
                        workflow_id=workflow_id,
                        workflow_type=c.WorkflowType(name="wt"),
                        task_list="limited",
                    ),
                    metadata=it.metadata("starter"),
                )
            task = await stub.PollForDecisionTask(
                s.PollForDecisionTaskRequest(namespace="default", task_list="limited"),
                metadata=worker,
            )
            # The principal's one waiting poll, elsewhere.
            waiting = asyncio.ensure_future(
                stub.PollForActivityTask(
                    s.PollForActivityTaskRequest(namespace="default", task_list="quiet"),
                    metadata=worker,
                )
            )
            await parked(node, "activity", "quiet")
            resp = await stub.RespondDecisionTaskCompleted(
                s.RespondDecisionTaskCompletedRequest(
                    task_token=task.task_token,
                    decisions=[complete("done")],
                    next_poll=s.PollForDecisionTaskRequest(
                        namespace="default", task_list="limited"
                    ),
                ),
                metadata=worker,
            )
            # Not let wait, and so not handed the other run's task, which waits.
            assert resp.HasField("next_task") and not resp.next_task.task_token
            history = await stub.GetWorkflowHistory(
                s.GetWorkflowHistoryRequest(
                    namespace="default", execution=c.WorkflowExecution(workflow_id="limited")
                ),
                metadata=it.metadata("reader"),
            )
            assert history.events[-1].type == "WorkflowSuccess"
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)

            # The folded poll gave its place back: once the cancelled one has
            # too, a poll of its own is let in, and takes the task that waited.
            async def next_task() -> s.PollForDecisionTaskResponse | None:
                try:
                    return await stub.PollForDecisionTask(
                        s.PollForDecisionTaskRequest(namespace="default", task_list="limited"),
                        metadata=worker,
                    )
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                    return None

            got = await wait_until(next_task, timeout=10)
            assert got.workflow_execution.workflow_id == "limited-next"
    finally:
        await node.stop(grace=0.5)

"""A worker's calls on lanes (`LaneService.Exchange`, `sdk.lanes`) behave as the
same calls unary: the same answers and refusals, a deadline that takes no task
with it, a cancelled caller cancelled in the server, a drain that does not wait
on them, and a server without lanes called unary. A real node on both databases
(the permission matrix on lanes is in security/test_auth_matrix.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import grpc
import pytest

from orchestrator.api import handlers
from orchestrator.config import ServerConfig
from orchestrator.server import Server
from sdk import AsyncClient
from sdk.api.weft.v1 import lanes_pb2 as pb
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from sdk.errors import InvalidArgumentError, UnavailableError
from sdk.lanes import MAX_IDLE, PLACEMENT_WAIT, Lanes, LanesUnsupported, Placement
from sdk.poll_connections import spread_connections
from tests.e2e.security.auth_matrix_setup import parked
from tests.helpers import rpc_calls, unique, wait_until


@pytest.fixture
def server_config(db_url: str) -> ServerConfig:
    """gRPC lanes only: direct lanes, which a loopback node offers and would carry
    these calls, behave the same way (tests/e2e/test_direct_lanes.py)."""
    return ServerConfig(
        db_url=db_url, listen="127.0.0.1:0", long_poll=3.0, drain_grace=1.0, direct_lanes=False
    )


BAD_LANE_CALLS: list[tuple[bytes, grpc.StatusCode, str]] = [
    (b"\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT, "not a valid LaneCall"),
    (
        pb.LaneCall(method="NoSuchMethod").SerializeToString(),
        grpc.StatusCode.UNIMPLEMENTED,
        "no method 'NoSuchMethod'",
    ),
    (
        pb.LaneCall(method="PollForDecisionTask", request=b"\xff\xff").SerializeToString(),
        grpc.StatusCode.INVALID_ARGUMENT,
        "not a valid PollForDecisionTaskRequest",
    ),
]
"""Messages a lane (gRPC or direct) answers with a refusal, the stream going on:
the message, the code, words of the details."""


def poll(task_list: str) -> s.PollForDecisionTaskRequest:
    return s.PollForDecisionTaskRequest(task_list=task_list, identity="lane-test")


def heartbeat() -> s.RecordActivityHeartbeatRequest:
    return s.RecordActivityHeartbeatRequest(task_token=b"not a token")


async def refusal(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code(), caught.value.details() or ""


def lanes_open(server: Server) -> int:
    assert server._lanes is not None
    return server._lanes.open


async def no_lanes_open(server: Server) -> bool:
    return lanes_open(server) == 0


async def test_a_workers_calls_go_on_one_lane_and_get_their_answers(server: Server) -> None:
    task_list = unique("tl")
    async with AsyncClient(f"127.0.0.1:{server.port}") as client:
        waiting = asyncio.create_task(client.rpc("PollForDecisionTask", poll(task_list)))
        await parked(server, "decision", task_list)
        run = await client.start_workflow("t", None, task_list=task_list)
        task = await waiting
        assert task.workflow_execution.run_id == run.run_id
        assert task.events[-1].type == "DeciderStarted"
        answer = s.RespondDecisionTaskCompletedRequest(task_token=task.task_token)
        await client.rpc("RespondDecisionTaskCompleted", answer)
        assert lanes_open(server) == 1  # (the answer went on the poll's stream)
    assert rpc_calls(server, "PollForDecisionTask", "OK") == 1
    assert rpc_calls(server, "RespondDecisionTaskCompleted", "OK") == 1


async def test_a_refusal_on_a_lane_is_the_unary_one(
    server: Server, stub: sg.WorkflowServiceStub
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        lanes = Lanes(channel, ())
        unary = await refusal(stub.RecordActivityHeartbeat(heartbeat(), timeout=10))
        on_lane = await refusal(lanes.call("RecordActivityHeartbeat", heartbeat(), 10))
        assert on_lane == unary
        assert on_lane[0] == grpc.StatusCode.INVALID_ARGUMENT
        # The stream is still good for the next call.
        request = s.DescribeWorkflowRequest(namespace="default", execution={"workflow_id": "x"})
        code, _ = await refusal(lanes.call("DescribeWorkflow", request, 10))
        assert code == grpc.StatusCode.NOT_FOUND
        assert lanes_open(server) == 1


async def test_a_burst_of_calls_leaves_no_more_idle_lanes_open_than_kept(server: Server) -> None:
    """Forty calls at once take forty streams; once they are answered the
    channel keeps `MAX_IDLE` of them for its next calls and ends the others."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        lanes = Lanes(channel, ())
        calls = [lanes.call("RecordActivityHeartbeat", heartbeat(), 10) for _ in range(40)]
        codes = {code for code, _ in await asyncio.gather(*(refusal(c) for c in calls))}
        assert codes == {grpc.StatusCode.INVALID_ARGUMENT}

        async def kept_only() -> bool:
            return lanes_open(server) == MAX_IDLE

        await wait_until(kept_only, timeout=10)
        assert rpc_calls(server, "RecordActivityHeartbeat") == 40
        await refusal(lanes.call("RecordActivityHeartbeat", heartbeat(), 10))
        assert lanes_open(server) == MAX_IDLE  # (an idle one took it)


class StandInStream:
    def __init__(self, ended: bool) -> None:
        self.ended, self.cancelled = ended, False

    def done(self) -> bool:
        return self.ended

    def cancel(self) -> bool:
        self.cancelled = True
        return True


async def test_streams_that_ended_while_idle_hold_no_place_among_the_kept() -> None:
    async with grpc.aio.insecure_channel("127.0.0.1:1") as channel:
        lanes = Lanes(channel, ())
        lanes._idle = [StandInStream(ended=True) for _ in range(MAX_IDLE)]
        live = StandInStream(ended=False)
        lanes._give_back(live)
        assert lanes._idle == [live] and not live.cancelled


async def test_bad_messages_on_a_lane_are_refused_and_the_stream_goes_on(server: Server) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        raw = channel.stream_stream(
            "/weft.v1.LaneService/Exchange",
            request_serializer=lambda b: b,
            response_deserializer=pb.LaneAnswer.FromString,
        )()
        sent = [
            *BAD_LANE_CALLS,
            (
                pb.LaneCall(
                    method="PollForDecisionTask", request=poll("").SerializeToString()
                ).SerializeToString(),
                grpc.StatusCode.INVALID_ARGUMENT,
                "task_list",
            ),
        ]
        for message, code, words in sent:
            await raw.write(message)
            answer = await raw.read()
            assert isinstance(answer, pb.LaneAnswer)
            assert (answer.code, answer.response) == (code.value[0], b"")
            assert words in answer.details
        raw.cancel()
    assert rpc_calls(server, "Exchange", "INVALID_ARGUMENT") == 1  # (the LaneCall itself)
    assert rpc_calls(server, "Exchange", "UNIMPLEMENTED") == 1


async def test_a_lane_poll_past_its_deadline_takes_no_task_with_it(server: Server) -> None:
    task_list = unique("tl")
    async with AsyncClient(f"127.0.0.1:{server.port}") as client:
        assert client._service() and client._lanes is not None
        # Shorter than the node's long poll (3 s): the caller's deadline ends it.
        code, _ = await refusal(client._lanes.call("PollForDecisionTask", poll(task_list), 0.3))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        await wait_until(lambda: no_lanes_open(server), timeout=10)  # (cut in the server)
        run = await client.start_workflow("t", None, task_list=task_list)
        task = await client.rpc("PollForDecisionTask", poll(task_list))
        assert task.workflow_execution.run_id == run.run_id, "the expired poll took the task"


async def test_a_cancelled_lane_call_is_cancelled_in_the_server(server: Server) -> None:
    task_list = unique("tl")
    async with AsyncClient(f"127.0.0.1:{server.port}") as client:
        waiting = asyncio.create_task(client.rpc("PollForDecisionTask", poll(task_list)))
        await parked(server, "decision", task_list)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await wait_until(lambda: no_lanes_open(server), timeout=10)
        assert rpc_calls(server, "PollForDecisionTask", "CANCELLED") == 1
        run = await client.start_workflow("t", None, task_list=task_list)
        task = await client.rpc("PollForDecisionTask", poll(task_list))
        assert task.workflow_execution.run_id == run.run_id, "the cancelled poll took the task"


@pytest.fixture
async def slow_drain(server_config: ServerConfig) -> AsyncIterator[Server]:
    node = Server(replace(server_config, drain_grace=30.0))
    await node.start()
    yield node
    await node.stop(grace=0.5)


async def test_a_drain_ends_idle_lanes_at_once_and_a_new_node_takes_the_calls(
    slow_drain: Server, server_config: ServerConfig
) -> None:
    node = slow_drain
    task_list = unique("tl")
    async with AsyncClient(f"127.0.0.1:{node.port}") as client:
        # One stream with a poll waiting, one idle (its call answered). The
        # poll's caller calls again the moment its empty answer comes: on the
        # stream the answer said was the last, that call would fail INTERNAL.
        async def poll_then_call() -> s.PollForDecisionTaskResponse:
            answer: s.PollForDecisionTaskResponse = await client.rpc(
                "PollForDecisionTask", poll(task_list)
            )
            with pytest.raises(UnavailableError):
                await client.rpc("RecordActivityHeartbeat", heartbeat(), retried=False)
            return answer

        waiting = asyncio.create_task(poll_then_call())
        await parked(node, "decision", task_list)
        with pytest.raises(InvalidArgumentError):
            await client.rpc("RecordActivityHeartbeat", heartbeat())
        assert lanes_open(node) == 2
        began = time.monotonic()
        await node.stop()
        assert time.monotonic() - began < 10, "the drain waited on the lanes"
        assert (await waiting).task_token == b""  # (the waiting poll answered empty)
        # The client's streams are gone with the node; a node on the same port
        # takes the next calls on new ones.
        again = Server(replace(server_config, listen=f"127.0.0.1:{node.port}"))
        await again.start()
        try:
            run = await client.start_workflow("t", None, task_list=task_list)
            task = await client.rpc("PollForDecisionTask", poll(task_list))
            assert task.workflow_execution.run_id == run.run_id
            assert lanes_open(again) == 1
        finally:
            await again.stop(grace=0.5)


class NoLanes:
    """A WorkflowService of an older server: polls answered empty, no lanes."""

    def __getattr__(self, name: str) -> Any:
        async def handler(request: Any, context: Any) -> s.PollForDecisionTaskResponse:
            return s.PollForDecisionTaskResponse()

        return handler


@contextlib.asynccontextmanager
async def without_lanes() -> AsyncIterator[int]:
    """A server of the release before lanes (`NoLanes`): its port."""
    server = grpc.aio.server()
    handlers.register(server, NoLanes(), s.DESCRIPTOR.services_by_name["WorkflowService"])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(0)


async def test_a_server_without_lanes_is_called_unary() -> None:
    async with without_lanes() as port, AsyncClient(f"127.0.0.1:{port}") as client:
        for _ in range(2):
            task = await client.rpc("PollForDecisionTask", poll("tl"))
            assert task.task_token == b""
        assert client._lanes is not None and not client._lanes.supported


async def test_a_lane_without_credentials_is_refused_at_once(server_config: ServerConfig) -> None:
    node = Server(replace(server_config, auth=True))
    await node.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
            for metadata in ((), (("authorization", "Bearer weft.k_000000000000.abc"),)):
                lanes = Lanes(channel, metadata)
                # The stream ends UNAUTHENTICATED: no answer, and nothing held open.
                code, details = await refusal(lanes.call("PollForDecisionTask", poll("tl"), 10))
                assert code == grpc.StatusCode.UNAUTHENTICATED
                assert details
                assert lanes_open(node) == 0
        assert rpc_calls(node, "Exchange", "UNAUTHENTICATED") == 2  # (counted and logged)
    finally:
        await node.stop(grace=0.5)


async def test_a_client_host_holds_no_more_lanes_than_polls(server_config: ServerConfig) -> None:
    node = Server(replace(server_config, max_polls_per_client=2))
    await node.start()
    task_list = unique("tl")
    try:
        async with AsyncClient(f"127.0.0.1:{node.port}") as client:
            polls = [
                asyncio.create_task(client.rpc("PollForDecisionTask", poll(task_list)))
                for _ in range(2)
            ]
            await wait_until(lambda: two_lanes_open(node), timeout=10)
            # A third lane is refused at its opening, and its call goes unary:
            # the call's own answer comes back, not the lane's refusal.
            with pytest.raises(InvalidArgumentError):
                await client.rpc("RecordActivityHeartbeat", heartbeat())
            assert rpc_calls(node, "Exchange", "RESOURCE_EXHAUSTED") == 1
            assert rpc_calls(node, "RecordActivityHeartbeat", "INVALID_ARGUMENT") == 1
            assert lanes_open(node) == 2
            assert client._lanes is not None
            with pytest.raises(LanesUnsupported):
                await client._lanes.call("RecordActivityHeartbeat", heartbeat(), 10)
            assert client._lanes.supported  # (the next call tries a lane again)
            for waiting in polls:
                assert (await waiting).task_token == b""  # (the long poll ran out)
    finally:
        await node.stop(grace=0.5)


async def two_lanes_open(server: Server) -> bool:
    return lanes_open(server) == 2


async def answer_once(calls: Any, context: Any) -> AsyncIterator[pb.LaneAnswer]:
    """A lane that answers its first call, then ends (without saying so)."""
    async for _ in calls:
        yield pb.LaneAnswer(response=s.PollForDecisionTaskResponse().SerializeToString())
        return


@contextlib.asynccontextmanager
async def stand_in(lane: Any) -> AsyncIterator[int]:
    """A server whose `LaneService.Exchange` is `lane`, and whose WorkflowService
    answers every call empty (`NoLanes`): its port."""
    server = grpc.aio.server()
    handlers.register(server, NoLanes(), s.DESCRIPTOR.services_by_name["WorkflowService"])
    handler = grpc.stream_stream_rpc_method_handler(
        lane,
        request_deserializer=pb.LaneCall.FromString,
        response_serializer=pb.LaneAnswer.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("weft.v1.LaneService", {"Exchange": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield port
    finally:
        await server.stop(0)


async def test_a_call_on_a_stream_that_ended_unseen_goes_on_a_new_one() -> None:
    async with (
        stand_in(answer_once) as port,
        grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        lanes = Lanes(channel, ())
        # Each call at once after the last: the stream it takes from the pool
        # has ended, and grpc.aio has not always seen it yet.
        for _ in range(20):
            answer = await lanes.call("PollForDecisionTask", poll("tl"), 10)
            assert answer == s.PollForDecisionTaskResponse()


async def test_a_lane_says_which_process_of_its_port_took_it(server_config: ServerConfig) -> None:
    """A process of `weft server --workers 2` (its port shared): its lanes open
    with its node name and the number of processes, which a worker's poll
    connections are spread by (`sdk.poll_connections`); calls on them are
    handled once, as on any node."""
    node = Server(replace(server_config, reuse_port=True, port_processes=2, node_name="n#1"))
    await node.start()
    try:
        async with AsyncClient(f"127.0.0.1:{node.port}") as client:
            assert await client.placement() == Placement("n#1", 2)
            with pytest.raises(InvalidArgumentError):
                await client.rpc("RecordActivityHeartbeat", heartbeat())
            assert lanes_open(node) == 1  # (the call took the lane the placement opened)
        assert rpc_calls(node, "RecordActivityHeartbeat", "INVALID_ARGUMENT") == 1
    finally:
        await node.stop(grace=0.5)


async def test_a_server_without_lanes_says_no_placement(server: Server) -> None:
    async with without_lanes() as port, AsyncClient(f"127.0.0.1:{port}") as client:
        assert await client.placement() is None
        assert client._lanes is not None and not client._lanes.supported
    # A node of its own on its port: one process; a worker dials no more,
    # and its connections open when they are first used.
    async with AsyncClient(f"127.0.0.1:{server.port}") as client:
        place = await client.placement()
        assert place is not None and place.processes == 1 and place.node
        assert await client.placement() == place and lanes_open(server) == 1  # (reused)
        connections: list[AsyncClient] = []
        await spread_connections(client, 4, connections)
        assert len(connections) == 4
        assert lanes_open(server) == 1
        await asyncio.gather(*(c.close() for c in connections))


async def end_at_once(calls: Any, context: Any) -> AsyncIterator[pb.LaneAnswer]:
    """A lane that ends before it takes a call (as one opened during a drain)."""
    return
    yield  # (a generator: the stream's handler)


async def test_a_call_whose_new_stream_ends_untaken_goes_unary() -> None:
    async with stand_in(end_at_once) as port, AsyncClient(f"127.0.0.1:{port}") as client:
        for _ in range(3):
            task = await client.rpc("PollForDecisionTask", poll("tl"), retried=False)
            assert task.task_token == b""  # (the unary answer)
        assert client._lanes is not None and client._lanes.supported


async def answer_each(calls: Any, context: Any) -> AsyncIterator[pb.LaneAnswer]:
    """A lane of the release before placements: it answers every call, and says
    nothing at its opening (its initial metadata comes with its first answer)."""
    async for _ in calls:
        yield pb.LaneAnswer(response=s.PollForDecisionTaskResponse().SerializeToString())


async def test_a_server_that_says_nothing_of_its_placement_holds_a_worker_one_wait_at_most() -> (
    None
):
    async with stand_in(answer_each) as port, AsyncClient(f"127.0.0.1:{port}") as client:
        began = time.monotonic()
        connections: list[AsyncClient] = []
        await spread_connections(client, 4, connections)
        assert time.monotonic() - began < PLACEMENT_WAIT + 1.0
        assert len(connections) == 4
        try:
            # Its lanes still carry calls, the one the placement opened among them.
            for connection in (client, *connections):
                assert await connection.rpc("PollForDecisionTask", poll("tl")) == (
                    s.PollForDecisionTaskResponse()
                )
        finally:
            await asyncio.gather(*(c.close() for c in connections))

"""Direct lanes (`orchestrator.api.direct_lanes`, `sdk.direct_lanes`): a worker
on the node's machine sends its task calls on a bare loopback connection, and
they behave as on a gRPC lane (tests/e2e/test_lanes.py): the same answers and
refusals, a deadline or a cancel that takes no task with it, a drain that does
not wait on them, each client host's share of lanes; a connection that breaks
the protocol is closed and nothing else. Only a loopback node without TLS or
authentication offers them. A real node on both databases."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import grpc
import pytest

from orchestrator.api import direct_lanes
from orchestrator.config import ServerConfig
from orchestrator.server import Server
from sdk import AsyncClient
from sdk.api.weft.v1 import lanes_pb2 as pb
from sdk.api.weft.v1 import service_pb2 as s
from sdk.direct_lanes import DirectLaneEnded, DirectLanes, DirectUnavailable
from sdk.errors import InvalidArgumentError, WeftError
from tests.e2e.security.auth_matrix_setup import parked
from tests.e2e.test_lanes import BAD_LANE_CALLS
from tests.helpers import rpc_calls, unique, wait_until

FRAME = struct.Struct(">I")


def poll(task_list: str) -> s.PollForDecisionTaskRequest:
    return s.PollForDecisionTaskRequest(task_list=task_list, identity="direct-test")


def heartbeat() -> s.RecordActivityHeartbeatRequest:
    return s.RecordActivityHeartbeatRequest(task_token=b"not a token")


def direct_of(client: AsyncClient) -> DirectLanes | None:
    assert client._lanes is not None
    return client._lanes.direct


def direct_open(server: Server) -> int:
    assert server._direct is not None
    return server._direct.open_connections


async def none_open(server: Server) -> bool:
    return direct_open(server) == 0


async def on_direct_lanes(server: Server, host: str = "127.0.0.1") -> AsyncClient:
    """A client that has seen the node's direct lanes (a worker sees them as it
    places its connections)."""
    client = AsyncClient(f"{host}:{server.port}")
    await client.placement()
    assert client._lanes is not None and client._lanes.direct is not None
    return client


async def test_a_workers_calls_go_on_a_direct_lane_and_get_their_answers(server: Server) -> None:
    task_list = unique("tl")
    client = await on_direct_lanes(server)
    async with client:
        waiting = asyncio.create_task(client.rpc("PollForDecisionTask", poll(task_list)))
        await parked(server, "decision", task_list)
        assert direct_open(server) == 1
        run = await client.start_workflow("t", None, task_list=task_list)
        task = await waiting
        assert task.workflow_execution.run_id == run.run_id
        assert task.events[-1].type == "DeciderStarted"
        answer = s.RespondDecisionTaskCompletedRequest(task_token=task.task_token)
        await client.rpc("RespondDecisionTaskCompleted", answer)
        assert direct_open(server) == 1  # (the answer went on the poll's connection)
        with pytest.raises(InvalidArgumentError):  # (a refusal, as unary; the lane goes on)
            await client.rpc("RecordActivityHeartbeat", heartbeat())
        assert direct_open(server) == 1
    await wait_until(lambda: none_open(server), timeout=10)  # (closed with the client)
    assert rpc_calls(server, "PollForDecisionTask", "OK") == 1
    assert rpc_calls(server, "RespondDecisionTaskCompleted", "OK") == 1
    assert rpc_calls(server, "RecordActivityHeartbeat", "INVALID_ARGUMENT") == 1


async def test_a_direct_poll_past_its_deadline_takes_no_task_with_it(server: Server) -> None:
    task_list = unique("tl")
    client = await on_direct_lanes(server)
    async with client:
        assert client._lanes is not None
        # Shorter than the node's long poll (3 s): the caller's deadline ends it.
        expiring = asyncio.create_task(
            client._lanes.call("PollForDecisionTask", poll(task_list), 0.5)
        )
        await parked(server, "decision", task_list)
        assert direct_open(server) == 1  # (the poll waits on a direct lane)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await expiring
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        await wait_until(lambda: none_open(server), timeout=10)  # (cut in the server)
        assert rpc_calls(server, "PollForDecisionTask", "CANCELLED") == 1
        run = await client.start_workflow("t", None, task_list=task_list)
        task = await client.rpc("PollForDecisionTask", poll(task_list))
        assert task.workflow_execution.run_id == run.run_id, "the expired poll took the task"


async def test_a_cancelled_direct_call_is_cancelled_in_the_server(server: Server) -> None:
    task_list = unique("tl")
    client = await on_direct_lanes(server)
    async with client:
        waiting = asyncio.create_task(client.rpc("PollForDecisionTask", poll(task_list)))
        await parked(server, "decision", task_list)
        assert direct_open(server) == 1  # (the poll waits on a direct lane)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await wait_until(lambda: none_open(server), timeout=10)
        assert rpc_calls(server, "PollForDecisionTask", "CANCELLED") == 1
        run = await client.start_workflow("t", None, task_list=task_list)
        task = await client.rpc("PollForDecisionTask", poll(task_list))
        assert task.workflow_execution.run_id == run.run_id, "the cancelled poll took the task"


async def test_a_drain_closes_direct_lanes_without_waiting_and_a_new_node_takes_the_calls(
    server_config: ServerConfig,
) -> None:
    node = Server(replace(server_config, drain_grace=30.0))
    await node.start()
    task_list = unique("tl")
    client = await on_direct_lanes(node)
    async with client:
        waiting = asyncio.create_task(client.rpc("PollForDecisionTask", poll(task_list)))
        await parked(node, "decision", task_list)
        with pytest.raises(InvalidArgumentError):
            await client.rpc("RecordActivityHeartbeat", heartbeat())
        assert direct_open(node) == 2  # (one waiting, one idle)
        began = time.monotonic()
        await node.stop(grace=30.0)
        assert time.monotonic() - began < 10, "the drain waited on the direct lanes"
        assert (await waiting).task_token == b""  # (the waiting poll answered empty)
        assert direct_open(node) == 0
        # A node on the same port: the client finds its direct lanes through a
        # gRPC lane again and sends its calls there.
        again = Server(replace(server_config, listen=f"127.0.0.1:{node.port}"))
        await again.start()
        try:
            run = await client.start_workflow("t", None, task_list=task_list)
            task = await client.rpc("PollForDecisionTask", poll(task_list))
            assert task.workflow_execution.run_id == run.run_id
            await client.rpc("RecordActivityHeartbeat", heartbeat(), retried=False)
        except InvalidArgumentError:
            assert direct_open(again) == 1
        finally:
            await again.stop(grace=0.5)


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])
async def test_a_client_host_holds_no_more_direct_lanes_than_polls(
    server_config: ServerConfig, host: str
) -> None:
    """With --max-polls-per-client 2, the placement's gRPC lane and one direct
    lane are the host's two (on IPv6 too: the same client): a second direct
    lane is closed at once, and its call goes on, on a gRPC lane or unary."""
    node = Server(replace(server_config, max_polls_per_client=2, listen=f"{host}:0"))
    await node.start()
    task_list = unique("tl")
    try:
        client = await on_direct_lanes(node, host)
        async with client:
            waiting = asyncio.create_task(client.rpc("PollForDecisionTask", poll(task_list)))
            await parked(node, "decision", task_list)
            with pytest.raises(InvalidArgumentError):
                await client.rpc("RecordActivityHeartbeat", heartbeat())
            assert direct_open(node) == 1
            assert node._lanes is not None and node._lanes.open == 2
            assert client._lanes is not None and client._lanes.direct is not None  # (kept)
            waiting.cancel()
    finally:
        await node.stop(grace=0.5)


async def frames(address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, _, port = address.rpartition(":")
    return await asyncio.open_connection(host, int(port))


def frame(body: bytes) -> bytes:
    return FRAME.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = FRAME.unpack(await reader.readexactly(FRAME.size))
    return await reader.readexactly(size)


async def closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Whether the node closed the connection (then closed here too)."""
    try:
        return await asyncio.wait_for(reader.read(), 10) == b""
    finally:
        writer.close()


async def test_a_connection_that_breaks_the_protocol_is_closed_and_nothing_else(
    server: Server,
) -> None:
    assert server._direct is not None
    address, key = server._direct.address, server._direct.key.encode()
    # A wrong key: an empty greeting, and closed before any call.
    reader, writer = await frames(address)
    writer.write(frame(b"0" * len(key)) + frame(pb.LaneCall(method="x").SerializeToString()))
    assert await read_frame(reader) == b""
    assert await closed(reader, writer)
    # A greeting longer than any key: closed.
    reader, writer = await frames(address)
    writer.write(FRAME.pack(1 << 20))
    assert await closed(reader, writer)
    # A frame longer than any message: closed.
    reader, writer = await frames(address)
    writer.write(frame(key) + FRAME.pack(2**31))
    assert await read_frame(reader) == server._lanes.node_name.encode()  # type: ignore[union-attr]
    assert await closed(reader, writer)
    # Bad messages are answered as on a gRPC lane, and the connection goes on; a
    # second call before the first's answer closes it and cancels the first.
    task_list = unique("tl")
    reader, writer = await frames(address)
    writer.write(frame(key))
    await read_frame(reader)
    for message, code, words in BAD_LANE_CALLS:
        writer.write(frame(message))
        framed = await read_frame(reader)
        assert framed[:1] == b"\x01"
        answer = pb.LaneAnswer.FromString(framed[1:])
        assert (answer.code, answer.response) == (code.value[0], b"")
        assert words in answer.details
    call = pb.LaneCall(method="PollForDecisionTask", request=poll(task_list).SerializeToString())
    writer.write(frame(call.SerializeToString()))
    await parked(server, "decision", task_list)
    writer.write(frame(call.SerializeToString()))
    assert await closed(reader, writer)
    await wait_until(lambda: none_open(server), timeout=10)
    assert rpc_calls(server, "PollForDecisionTask", "CANCELLED") == 1
    # (a wrong key, a long greeting, a long frame, a second call: each counted)
    assert rpc_calls(server, "DirectLane", "INVALID_ARGUMENT") == 4
    # The node serves on, directly and otherwise.
    client = await on_direct_lanes(server)
    async with client:
        run = await client.start_workflow("t", None, task_list=task_list)
        task = await client.rpc("PollForDecisionTask", poll(task_list))
        assert task.workflow_execution.run_id == run.run_id


async def test_an_address_that_is_not_the_nodes_is_not_used(server: Server) -> None:
    """A port that answers otherwise (another service, a tunnel's far end) is
    given up at its first connection; the calls go on gRPC lanes."""
    sent_to_stranger: list[bytes] = []

    async def stranger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            sent_to_stranger.append(await reader.read(1000))
            writer.write(frame(b"someone else"))
            await writer.drain()
            await reader.read()
        finally:
            writer.close()

    other = await asyncio.start_server(stranger, "127.0.0.1", 0)
    port = other.sockets[0].getsockname()[1]
    try:
        client = await on_direct_lanes(server)
        async with client:
            assert client._lanes is not None
            client._lanes.direct = DirectLanes(f"127.0.0.1:{port}", "k", "n", 1 << 20)
            with pytest.raises(InvalidArgumentError):
                await client.rpc("RecordActivityHeartbeat", heartbeat())
            assert direct_of(client) is None
            assert sent_to_stranger == [frame(b"k")]  # (the key only: never a call)
    finally:
        other.close()
        await other.wait_closed()


@pytest.mark.parametrize(
    ("changes", "host"),
    [
        ({}, "127.0.0.1"),
        ({"listen": "localhost:7400"}, "127.0.0.1"),
        ({"listen": "[::1]:7400"}, "::1"),
        ({"direct_lanes": False}, None),
        ({"tls_cert": "c.pem", "tls_key": "k.pem"}, None),
        ({"tls_client_ca": "ca.pem"}, None),
        ({"auth": True}, None),
        ({"listen": "0.0.0.0:7400", "insecure": True}, None),
        ({"listen": "unix:/tmp/weft.sock"}, None),
    ],
)
def test_only_a_loopback_node_without_tls_or_auth_offers_direct_lanes(
    changes: dict[str, object], host: str | None
) -> None:
    config = replace(ServerConfig(listen="127.0.0.1:7400"), **changes)  # type: ignore[arg-type]
    assert config.direct_lanes_host() == host


async def test_a_node_with_auth_offers_no_direct_lanes(server_config: ServerConfig) -> None:
    node = Server(replace(server_config, auth=True))
    await node.start()
    try:
        assert node._direct is None
        assert node._lanes is not None
        assert all(key != "weft-direct-lane" for key, _ in node._lanes.placement)
    finally:
        await node.stop(grace=0.5)


async def test_a_direct_lane_given_up_lets_the_calls_on_the_others_finish(server: Server) -> None:
    """A new connection that fails (here: the node's listener is gone) retires
    the client's direct lanes, but a poll waiting on one goes on and takes its task."""
    task_list = unique("tl")
    client = await on_direct_lanes(server)
    async with client:
        waiting = asyncio.create_task(client.rpc("PollForDecisionTask", poll(task_list)))
        await parked(server, "decision", task_list)
        assert server._direct is not None and server._direct._server is not None
        server._direct._server.close()  # (no new connection from here on)
        with pytest.raises(InvalidArgumentError):  # (on a gRPC lane)
            await client.rpc("RecordActivityHeartbeat", heartbeat())
        assert direct_of(client) is None and direct_open(server) == 1
        run = await client.start_workflow("t", None, task_list=task_list)
        task = await waiting
        assert task.workflow_execution.run_id == run.run_id


async def test_a_connection_that_never_sends_the_key_is_closed_and_holds_no_share(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct_lanes, "GREETING_WAIT", 0.3)
    assert server._direct is not None
    reader, writer = await frames(server._direct.address)
    await asyncio.sleep(0.1)  # (the node has taken the connection: no share for it)
    assert server._lanes is not None and server._lanes.open == 0
    assert await closed(reader, writer)


class FakeNode:
    """A direct-lane port that greets as node "n" and then answers each call
    with `reply(connection number)`: bytes to send, or None to close unanswered."""

    def __init__(self, reply: Callable[[int], bytes | None]) -> None:
        self.reply, self.calls, self._count = reply, 0, 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._count += 1
        number = self._count
        try:
            await read_frame(reader)  # (the key)
            writer.write(frame(b"n"))
            await read_frame(reader)
            self.calls += 1
            sent = self.reply(number)
            if sent is not None:
                writer.write(frame(sent))
                await writer.drain()
                await reader.read()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def fake_node(reply: Callable[[int], bytes | None]) -> AsyncIterator[tuple[FakeNode, int]]:
    node = FakeNode(reply)
    listener = await asyncio.start_server(node.serve, "127.0.0.1", 0)
    try:
        yield node, listener.sockets[0].getsockname()[1]
    finally:
        listener.close()
        await listener.wait_closed()


async def test_a_call_the_node_may_have_taken_is_not_sent_again() -> None:
    """A connection that ends after taking a call, unanswered, fails the call
    as a cut gRPC stream does: it is not sent again (it may have run)."""
    async with fake_node(lambda number: None) as (node, port):
        lanes = DirectLanes(f"127.0.0.1:{port}", "k", "n", 1 << 20)
        with pytest.raises(DirectLaneEnded):
            await lanes.exchange(pb.LaneCall(method="PollForDecisionTask"))
        assert node.calls == 1
        lanes.close()


async def test_a_call_the_node_says_it_did_not_take_goes_on_a_new_connection() -> None:
    answered = pb.LaneAnswer(response=b"ok")

    def reply(number: int) -> bytes:  # (the first connection: closed at a drain)
        return b"\x00" if number == 1 else b"\x01" + answered.SerializeToString()

    async with fake_node(reply) as (node, port):
        lanes = DirectLanes(f"127.0.0.1:{port}", "k", "n", 1 << 20)
        assert await lanes.exchange(pb.LaneCall(method="PollForDecisionTask")) == answered
        assert node.calls == 2
        lanes.close()


async def test_a_node_that_took_nothing_twice_sends_the_call_to_a_grpc_lane() -> None:
    """Drained between a new connection's greeting and its call: still nothing
    taken, so the call may go elsewhere (not UNAVAILABLE)."""
    async with fake_node(lambda number: b"\x00") as (node, port):
        lanes = DirectLanes(f"127.0.0.1:{port}", "k", "n", 1 << 20)
        with pytest.raises(DirectUnavailable) as caught:
            await lanes.exchange(pb.LaneCall(method="PollForDecisionTask"))
        assert not caught.value.for_good and node.calls == 2
        lanes.close()


async def test_a_draining_greeting_is_not_taken_for_another_node() -> None:
    async def draining(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_frame(reader)
        writer.write(frame(b"\x00"))
        writer.close()

    listener = await asyncio.start_server(draining, "127.0.0.1", 0)
    try:
        lanes = DirectLanes(f"127.0.0.1:{listener.sockets[0].getsockname()[1]}", "k", "n", 1 << 20)
        with pytest.raises(DirectUnavailable) as caught:
            await lanes.exchange(pb.LaneCall(method="PollForDecisionTask"))
        assert not caught.value.for_good  # (the node is going; its address was right)
    finally:
        listener.close()
        await listener.wait_closed()


async def test_closing_the_client_ends_calls_on_direct_lanes_it_gave_up(server: Server) -> None:
    task_list = unique("tl")
    client = await on_direct_lanes(server)
    waiting = asyncio.create_task(client.rpc("PollForDecisionTask", poll(task_list)))
    await parked(server, "decision", task_list)
    assert server._direct is not None and server._direct._server is not None
    server._direct._server.close()
    with pytest.raises(InvalidArgumentError):  # (its new connection fails: given up)
        await client.rpc("RecordActivityHeartbeat", heartbeat())
    await client.close()
    with pytest.raises(WeftError):  # (CANCELLED, as a closed channel's calls)
        await waiting
    await wait_until(lambda: none_open(server), timeout=10)
    assert rpc_calls(server, "PollForDecisionTask", "CANCELLED") == 1

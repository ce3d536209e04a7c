"""A worker's polls and answers sent on streams of `LaneService.Exchange`.

A message on an open stream costs the server and the worker about a third of a
unary call (bench/README.md, "Lanes"), and a worker sends two calls per
activity, so `AsyncClient` sends the task methods (`LANE_METHODS`) this way:
each call takes an idle stream (or opens one), sends its request, reads the
answer, and gives the stream back. There are as many streams as calls in
flight at once (in a worker, its poll lanes, and the answers and heartbeats it
sends on their own), and up to `MAX_IDLE` more, kept idle for the next calls:
a burst of calls leaves no more than that open once it is over.

A call on a stream behaves as the unary call does for its caller: the same
answer, the same `grpc.aio.AioRpcError` for a refusal (code, text, trailers),
its timeout as a deadline (DEADLINE_EXCEEDED), and a cancelled caller cancels
the call in the server. A stream the server cut while a call was on it raises
UNAVAILABLE, as a lost connection does (one that failed otherwise, its own
status); a call on an idle stream that had ended goes on a new one. A server
without `LaneService` (older than lanes) is called unary from then on, and a
call whose lane is refused for the client's share of lanes
(`LANE_REFUSED_METADATA`), or whose new stream ends before taking it, goes unary.

A lane opens with the name of the process that took it and how many serve its
port (`placement`): a worker spreads its poll connections by that
(`sdk.poll_connections`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import Message

from sdk.addresses import is_loopback
from sdk.api.weft.v1 import lanes_pb2 as pb
from sdk.api.weft.v1 import service_pb2
from sdk.direct_lanes import DirectLaneEnded, DirectLanes, DirectUnavailable
from sdk.errors import LANE_REFUSED_METADATA, rpc_error

LANE_METHODS = frozenset(
    {
        "PollForDecisionTask",
        "RespondDecisionTaskCompleted",
        "RespondDecisionTaskFailed",
        "PollForActivityTask",
        "RecordActivityHeartbeat",
        "RespondActivityTaskCompleted",
        "RespondActivityTaskFailed",
        "RespondActivityTaskCanceled",
    }
)
"""The WorkflowService methods a client sends on lanes: a worker's task calls."""
DIRECT_LANE_METADATA = "weft-direct-lane"
"""A lane's initial metadata, from a node that offers direct lanes
(`sdk.direct_lanes`): their address and the key a connection opens with."""
NODE_METADATA = "weft-node"
"""A lane's initial metadata: the name of the node (server process) that took it."""
PORT_PROCESSES_METADATA = "weft-port-processes"
"""A lane's initial metadata: how many processes serve the port it reached (the
N of `weft server --workers N`)."""
MAX_IDLE = 16
"""Idle streams a channel keeps for its next calls; a stream given back beyond
them is ended (each holds a task in the server, and counts against the client
host's share of lanes)."""
PLACEMENT_WAIT = 2.0
"""Seconds `AsyncClient.placement` waits for a lane's opening to say where it
landed (a server older than this SDK never says)."""

_EXCHANGE = "/weft.v1.LaneService/Exchange"
_METHODS = service_pb2.DESCRIPTOR.services_by_name["WorkflowService"].methods_by_name
_RESPONSES: dict[str, type[Message]] = {
    name: message_factory.GetMessageClass(m.output_type) for name, m in _METHODS.items()
}

Metadata = Sequence[tuple[str, str]] | None


Stream = grpc.aio.StreamStreamCall[Any, pb.LaneAnswer]


@dataclass(frozen=True)
class Placement:
    """Where a connection landed: the node (server process) it reached, of
    `processes` serving the same port."""

    node: str
    processes: int


class LanesUnsupported(Exception):
    """No lane for this call (the server has no `LaneService`, or this client
    host holds as many lanes as it may): the server took nothing; call it unary."""


_CODES = {code.value[0]: code for code in grpc.StatusCode}
# What grpc.aio raises for a write on a stream whose end it has not yet seen.
_WRITE_AFTER_END = "Internal error from Core"


class Lanes:
    """The streams of one channel, reused call after call."""

    def __init__(
        self, channel: grpc.aio.Channel, metadata: Metadata, direct_max_frame: int = 0
    ) -> None:
        self._open = channel.stream_stream(
            _EXCHANGE,
            request_serializer=pb.LaneCall.SerializeToString,
            response_deserializer=pb.LaneAnswer.FromString,
        )
        self._metadata = tuple(metadata or ())
        self._idle: list[Stream] = []
        self.supported = True
        """False once the server said it has no `LaneService`."""
        self._direct_max_frame = direct_max_frame
        """Above 0 (a client on loopback without TLS): direct lanes may be used,
        answers up to that many bytes."""
        self.direct: DirectLanes | None = None
        """The node's direct lanes, once a gRPC lane's opening named them."""
        self._given_up: list[DirectLanes] = []  # (retired, calls still on them)

    def close(self) -> None:
        """Close the direct lanes, given up ones with calls still on them too,
        as the channel's close ends the gRPC ones with theirs."""
        if self.direct is not None:
            self._given_up.append(self.direct)
            self.direct = None
        for direct in self._given_up:
            direct.close()
        self._given_up.clear()

    def _note_direct(self, metadata: dict[str, Any]) -> None:
        """Take the direct lanes a lane's opening names (with the node's name)."""
        offer, node = metadata.get(DIRECT_LANE_METADATA), metadata.get(NODE_METADATA)
        if self.direct is not None or not self._direct_max_frame:
            return
        if not isinstance(offer, str) or not isinstance(node, str):
            return
        address, _, key = offer.partition(" ")
        port = address.rpartition(":")[2]
        if not key or not port.isdecimal() or not is_loopback(address):
            return  # (a node names only a loopback address: anything else is not used)
        self.direct = DirectLanes(address, key, node, self._direct_max_frame)

    async def placement(self, timeout: float) -> Placement | None:
        """Which process of the port this channel reached, and how many serve
        it, as a lane's opening says: an idle lane's, or a new one's (which then
        waits in the pool for a call). None if the server has no lanes, says
        nothing of it (a server older than this SDK), or not within `timeout`."""
        if not self.supported:
            return None
        stream = next((idle for idle in reversed(self._idle) if not idle.done()), None)
        opened = stream is None
        if stream is None:
            stream = self._open(metadata=self._metadata)
        try:
            async with asyncio.timeout(timeout):
                metadata = dict(await stream.initial_metadata() or ())
        except (TimeoutError, grpc.aio.AioRpcError):
            if opened:
                stream.cancel()
            return None
        except BaseException:
            if opened:
                stream.cancel()
            raise
        if stream.done():  # refused at its opening
            if await stream.code() == grpc.StatusCode.UNIMPLEMENTED:
                self.supported = False
            return None
        if opened:
            self._give_back(stream)
        self._note_direct(metadata)
        node, processes = metadata.get(NODE_METADATA), metadata.get(PORT_PROCESSES_METADATA)
        if not isinstance(node, str) or not isinstance(processes, str):
            return None
        if not (processes.isascii() and processes.isdecimal()):
            return None
        return Placement(node, int(processes))

    async def call(self, method: str, request: Message, timeout: float | None) -> Any:
        """`WorkflowService.<method>(request)` on a stream, as the unary call would
        answer or fail; `LanesUnsupported` if the server has no lanes, or
        refused this client one (nothing was taken: call it unary)."""
        message = pb.LaneCall(method=method, request=request.SerializeToString())
        if self.direct is not None:
            answer = await self._call_direct(self.direct, message, timeout)
            if answer is not None:
                return self._result(method, answer)
        stream, reused = self._take()
        try:
            async with asyncio.timeout(timeout):
                answer = await self._send(stream, message, reused)
                if answer is None and reused:
                    # The idle stream had ended (the server ended it, or the
                    # connection went) before it took this call, which grpc.aio
                    # may not have seen yet: the call goes on a new stream.
                    stream = self._open(metadata=self._metadata)
                    answer = await self._send(stream, message, False)
        except TimeoutError:
            stream.cancel()  # (the call in the server too, as a unary deadline does)
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except grpc.aio.AioRpcError as exc:
            failure = self._broken(exc)
            if failure is exc:
                raise
            raise failure from exc
        except BaseException:
            stream.cancel()
            raise
        if answer is None:
            # A new stream ended before taking the call: refused at its opening
            # (no LaneService, the client's share) with the status lost to a
            # write in flight (grpc.aio then says only INTERNAL), or opened as
            # the node drains. Nothing was taken: the call goes unary.
            raise LanesUnsupported("the server ended a new stream before taking its call")
        if not answer.last:
            self._give_back(stream)
        if not reused and self.direct is None and self._direct_max_frame:
            self._note_direct(dict(await stream.initial_metadata() or ()))
        return self._result(method, answer)

    @staticmethod
    def _result(method: str, answer: pb.LaneAnswer) -> Any:
        if answer.code:
            code = _CODES.get(answer.code, grpc.StatusCode.UNKNOWN)
            raise rpc_error(code, answer.details, [(t.key, t.value) for t in answer.trailers])
        return _RESPONSES[method].FromString(answer.response)

    async def _call_direct(
        self, direct: DirectLanes, message: pb.LaneCall, timeout: float | None
    ) -> pb.LaneAnswer | None:
        """The answer on a direct lane; None if none took the call (it goes on
        a gRPC lane then: one whose opening names the node's direct lanes again,
        after a restart say, is used from then on)."""
        try:
            async with asyncio.timeout(timeout):
                return await direct.exchange(message)
        except DirectUnavailable as exc:
            if exc.for_good and self.direct is direct:
                self.direct = None
                direct.retire()  # (the calls on its other connections go on)
                self._given_up = [d for d in self._given_up if d.busy] + [direct]
            return None
        except TimeoutError:
            # (the connection was closed: the node cancels the call, as for a deadline)
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except DirectLaneEnded as exc:
            if exc.by_client:
                raise rpc_error(grpc.StatusCode.CANCELLED, "the client was closed") from exc
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, "the server ended the stream") from exc

    async def _send(
        self, stream: Stream, message: pb.LaneCall, reused: bool
    ) -> pb.LaneAnswer | None:
        """The stream's answer to `message`; None if the stream ended without
        taking it (the server answers every call whose handler it runs, so an
        end before the answer means the call was never handled)."""
        try:
            await stream.write(message)
        except asyncio.InvalidStateError:
            return None
        except grpc.aio.AioRpcError as exc:
            if reused or exc.details() == _WRITE_AFTER_END:
                return None
            raise
        answer = await stream.read()
        return answer if isinstance(answer, pb.LaneAnswer) else None  # (else EOF)

    def _give_back(self, stream: Stream) -> None:
        if len(self._idle) >= MAX_IDLE:
            # (Streams that ended meanwhile hold no place: `_take` would drop them.)
            self._idle = [idle for idle in self._idle if not idle.done()]
        if len(self._idle) < MAX_IDLE:
            self._idle.append(stream)
        else:
            stream.cancel()  # (the server ends the stream's task, as for a client gone)

    def _take(self) -> tuple[Stream, bool]:
        """An idle stream (True), or a new one (False)."""
        while self._idle:
            stream = self._idle.pop()
            if not stream.done():  # (one the server ended, or lost, is dropped)
                return stream, True
        return self._open(metadata=self._metadata), False

    def _broken(self, exc: grpc.aio.AioRpcError) -> Exception:
        """What a caller gets for a stream that failed (not a call's refusal)."""
        code = exc.code()
        if code == grpc.StatusCode.UNIMPLEMENTED:
            self.supported = False  # (nothing was sent to a method)
            return LanesUnsupported(exc.details())
        if any(item[0] == LANE_REFUSED_METADATA for item in exc.trailing_metadata() or ()):
            return LanesUnsupported(exc.details())  # (refused at its opening, before any call)
        if code == grpc.StatusCode.CANCELLED:
            # Cut by the server as it stopped (this caller's own cancel is a
            # CancelledError, not this).
            return rpc_error(grpc.StatusCode.UNAVAILABLE, "the server ended the stream")
        return exc

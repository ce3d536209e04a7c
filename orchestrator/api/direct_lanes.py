"""Direct lanes: a worker on this machine sends its task calls on a bare
loopback connection instead of a gRPC stream.

A message on a gRPC stream costs this server three to four times what the same
message costs framed by its length on an asyncio connection, and its worker two
to three times (`python -m bench.lane_transports`); on the whole hot path that
was a fifth to a quarter of the activities a second at 4 in flight (bench/README.md,
"what the lanes' transport costs"). A direct lane carries the same `LaneCall`s
and `LaneAnswer`s as a gRPC lane (`orchestrator/api/lanes.py`) and answers them
with the same handlers, so a call on one is validated, guarded, counted and
refused exactly as on the other.

A node offers them only where gRPC gives a lane nothing more: its gRPC port is
on loopback, with neither TLS nor authentication (`ServerConfig.direct_lanes`
says so). It listens on a loopback port of its own and names it, with a random
key, in the opening of every gRPC lane (`DIRECT_LANE_METADATA`). A client that
reached the node on loopback connects there, sends the key in its first frame,
and reads back the node's name: a port that answers otherwise (another service
on this host, a tunnel's other end) is not used. The connection is then one
lane: a call, its answer, the next call.

What a gRPC stream does for a lane, a direct lane does too:
- a client host holds no more of them than it may hold polls (they count
  with its gRPC lanes, `--max-polls-per-client`): one over is closed at once,
  and the client sends its calls on gRPC lanes instead;
- a connection that goes cancels the call it carried, as a cancelled stream
  does (a withdrawn poll is handed no task);
- at a drain, a connection waiting for its next call is closed, and one
  answering a call closes after its answer (marked `last`);
- a frame longer than the node's largest message, a second call before the
  answer, or a wrong key ends the connection (logged), and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
import struct
import uuid

import structlog

from orchestrator.dispatch.polls import client_of
from orchestrator.engine.errors import EngineError
from sdk.api.weft.v1 import lanes_pb2 as pb

from .handlers import MalformedRequest, lenient
from .in_process import CallContext
from .lanes import Lanes

log = structlog.get_logger("weft.api")

FRAME_HEADER = struct.Struct(">I")
"""Each frame: its length in four bytes (big-endian), then that many bytes."""
_parse_call = lenient(pb.LaneCall)


class DirectLanes:
    """One node's direct lanes: the listener and its connections."""

    def __init__(self, lanes: Lanes, max_frame: int) -> None:
        self._lanes = lanes
        self._max_frame = max_frame
        self.key = secrets.token_hex(16)
        """What a client sends first: it learnt it from a gRPC lane's opening."""
        self.address = ""
        """HOST:PORT listened on, once `open`."""
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._closing = False

    async def open(self, host: str) -> str:
        """Listen on HOST (a loopback address), on a port the system picks."""
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Connection(self), host, 0
        )
        bound = self._server.sockets[0].getsockname()
        self.address = f"[{bound[0]}]:{bound[1]}" if ":" in bound[0] else f"{bound[0]}:{bound[1]}"
        return self.address

    @property
    def open_connections(self) -> int:
        """Connections open now (each holds one of its client host's lanes)."""
        return len(self._connections)

    def close(self) -> None:
        """The node drains: take no more connections; close those waiting for a
        call now, the others after the answer they owe."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.drain()

    async def wait_closed(self, grace: float) -> None:
        """Wait up to `grace` seconds for the calls in flight to be answered,
        then cut what is left (its calls cancelled, as gRPC's stop does)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self._connections and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for connection in list(self._connections):
            connection.cut()
        if self._server is not None:
            await self._server.wait_closed()

    @property
    def closing(self) -> bool:
        return self._closing

    def _added(self, connection: _Connection) -> None:
        self._connections.add(connection)

    def _removed(self, connection: _Connection) -> None:
        self._connections.discard(connection)


class _Connection(asyncio.Protocol):
    """One direct lane: frames in, one call at a time, its answer out."""

    def __init__(self, owner: DirectLanes) -> None:
        self._owner = owner
        self._lanes = owner._lanes
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._greeted = False
        self._call: asyncio.Task[None] | None = None
        self._caller = CallContext(())
        self._share = contextlib.ExitStack()  # (the client host's share, while open)
        self._ending = False

    # -- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        host, port = (peer[0], peer[1]) if isinstance(peer, tuple) else ("?", 0)
        self._caller = CallContext(
            (), None, f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
        )
        client = client_of(self._caller.peer())
        if self._owner.closing:
            transport.close()
            return
        try:
            self._share.enter_context(self._lanes.share(client))
        except EngineError as exc:
            log.info("rpc.refused", rpc="DirectLane", code=exc.code_name, reason=str(exc))
            transport.close()  # (the client sends on gRPC lanes instead)
            return
        self._owner._added(self)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while not self._ending:
            frame = self._next_frame()
            if frame is None:
                return
            if not self._greeted:
                self._greet(frame)
            elif self._call is not None:
                self._end("a second call before the answer to the first")
            else:
                self._call = asyncio.get_running_loop().create_task(self._answer(frame))

    def connection_lost(self, exc: Exception | None) -> None:
        self._ending = True
        if self._call is not None:
            self._call.cancel()  # (as a cancelled gRPC stream cancels its call)
        self._share.close()
        self._owner._removed(self)

    # -- the node's side ------------------------------------------------------------

    def drain(self) -> None:
        """Close now if waiting for a call; after the answer otherwise."""
        if self._call is None:
            self._close()

    def cut(self) -> None:
        """Close now, the call in flight cancelled."""
        if self._transport is not None:
            self._transport.abort()

    # -- frames ---------------------------------------------------------------------

    def _next_frame(self) -> bytes | None:
        if len(self._buffer) < FRAME_HEADER.size:
            return None
        (size,) = FRAME_HEADER.unpack_from(self._buffer)
        if size > self._owner._max_frame:
            self._end(f"a frame of {size} bytes (at most {self._owner._max_frame})")
            return None
        end = FRAME_HEADER.size + size
        if len(self._buffer) < end:
            return None
        frame = bytes(self._buffer[FRAME_HEADER.size : end])
        del self._buffer[:end]
        return frame

    def _greet(self, frame: bytes) -> None:
        if not hmac.compare_digest(frame, self._owner.key.encode()):
            self._end("a wrong key")
            return
        self._greeted = True
        self._send(self._lanes.node_name.encode())

    async def _answer(self, frame: bytes) -> None:
        try:
            call = _parse_call(frame)
            assert isinstance(call, (pb.LaneCall, MalformedRequest))
            answer = await self._lanes.answer(call, self._caller)
        except asyncio.CancelledError:
            raise  # (the connection went: nothing to answer)
        except Exception:
            ref = uuid.uuid4().hex[:12]
            log.exception("rpc.crashed", rpc="DirectLane", ref=ref)
            self._close()
            return
        finally:
            self._call = None
        answer.last = self._owner.closing
        self._send(answer.SerializeToString())
        if answer.last:
            self._close()

    def _send(self, body: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(FRAME_HEADER.pack(len(body)) + body)

    def _end(self, why: str) -> None:
        """A client that broke the protocol: log it, close, cancel its call."""
        log.info("rpc.refused", rpc="DirectLane", code="INVALID_ARGUMENT", reason=why)
        self._ending = True
        self.cut()

    def _close(self) -> None:
        self._ending = True
        if self._transport is not None:
            self._transport.close()

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
  answer, or a wrong key ends the connection (logged), and nothing else; a
  connection that has not sent the key within `GREETING_WAIT` seconds is
  closed, and only one that has holds a share;
- an answer the client does not read stops the reading of its next calls (as
  gRPC's flow control would), instead of piling up here.

EOF on a direct lane does not say whether the call was taken, as a gRPC status
does. So a node that closes a connection without a call in flight (a drain)
first says so (`NOT_TAKEN`): only then does the client
send the call again elsewhere (`sdk.direct_lanes`). A wrong key is answered by
an empty greeting, so the client stops trying that address.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
import struct
import uuid
from typing import cast

import grpc
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
ANSWER = b"\x01"
"""The first byte of a frame that carries a `LaneAnswer` (an empty answer
encodes to nothing: the byte tells it from `NOT_TAKEN`)."""
NOT_TAKEN = b"\x00"
"""A frame of this byte alone: the node closes the connection and took no call on it."""
GREETING_WAIT = 5.0
"""Seconds a new connection has to send the key before it is closed."""
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
        """Connections open now that sent the key (each holds one of its client
        host's lanes)."""
        return sum(1 for c in self._connections if c.greeted)

    @property
    def closing(self) -> bool:
        return self._closing

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
        then cut what is left, and wait until its calls have ended (cancelled,
        as gRPC's stop cancels them): nothing of theirs runs after this."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self._connections and loop.time() < deadline:
            await asyncio.sleep(0.02)
        calls = [c.call for c in self._connections if c.call is not None]
        for connection in list(self._connections):
            connection.cut()
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        while self._connections:  # (each goes at its connection_lost, a turn of the loop)
            await asyncio.sleep(0)

    def refused(self, code: str, reason: str) -> None:
        log.info("rpc.refused", rpc="DirectLane", code=code, reason=reason)
        self._lanes.count("DirectLane", code)

    def _added(self, connection: _Connection) -> None:
        self._connections.add(connection)

    def _removed(self, connection: _Connection) -> None:
        self._connections.discard(connection)


class _Connection(asyncio.Protocol):
    """One direct lane: the key, then frames in, one call at a time, its answer out."""

    def __init__(self, owner: DirectLanes) -> None:
        self._owner = owner
        self._lanes = owner._lanes
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self.greeted = False
        self.call: asyncio.Task[None] | None = None
        self._caller = CallContext(())
        self._client = ""
        self._share = contextlib.ExitStack()  # (the client host's share, once greeted)
        self._ending = False
        self._greeting_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        self._owner._added(self)
        if self._owner.closing:
            self._close()
            return
        peer = transport.get_extra_info("peername")
        host, port = (peer[0], peer[1]) if isinstance(peer, tuple) else ("?", 0)
        # gRPC's own form of a peer ("ipv6:%5B::1%5D:…"), so that a host's direct
        # and gRPC lanes count as one client's (`client_of`).
        self._caller = CallContext(
            (), None, f"ipv6:%5B{host}%5D:{port}" if ":" in host else f"ipv4:{host}:{port}"
        )
        self._client = client_of(self._caller.peer())
        self._greeting_timer = asyncio.get_running_loop().call_later(
            GREETING_WAIT, self._no_greeting
        )

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while not self._ending:
            frame = self._next_frame()
            if frame is None:
                return
            if not self.greeted:
                self._greet(frame)
            elif self.call is not None:
                self._end("a second call before the answer to the first")
            else:
                self.call = asyncio.get_running_loop().create_task(self._answer(frame))

    def eof_received(self) -> bool:
        return False  # (the client is gone: close; `connection_lost` cancels its call)

    def pause_writing(self) -> None:
        # A client that does not read its answers: read none of its calls until it does.
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._ending = True
        if self._greeting_timer is not None:
            self._greeting_timer.cancel()
        if self.call is not None:
            self.call.cancel()  # (as a cancelled gRPC stream cancels its call)
        try:
            self._share.close()
        finally:
            self._owner._removed(self)  # (`wait_closed` waits for this)

    # -- the node's side ------------------------------------------------------------

    def drain(self) -> None:
        """Close now if no call is in flight (saying "nothing taken" first, so
        that a call the client sent meanwhile goes elsewhere); after the
        answer otherwise."""
        if self.call is None:
            if self.greeted:  # (before its greeting, a connection took nothing anyway)
                self._send(NOT_TAKEN)
            self._close()

    def cut(self) -> None:
        """Close now (its call is cancelled at `connection_lost`)."""
        self._ending = True
        if self._transport is not None:
            self._transport.abort()

    # -- frames ---------------------------------------------------------------------

    def _next_frame(self) -> bytes | None:
        if len(self._buffer) < FRAME_HEADER.size:
            return None
        (size,) = FRAME_HEADER.unpack_from(self._buffer)
        largest = self._owner._max_frame if self.greeted else len(self._owner.key)
        if size > largest:
            self._end(f"a frame of {size} bytes (at most {largest} here)")
            return None
        end = FRAME_HEADER.size + size
        if len(self._buffer) < end:
            return None
        frame = bytes(self._buffer[FRAME_HEADER.size : end])
        del self._buffer[:end]
        return frame

    def _greet(self, frame: bytes) -> None:
        if self._greeting_timer is not None:
            self._greeting_timer.cancel()
        if not hmac.compare_digest(frame, self._owner.key.encode()):
            self._owner.refused("INVALID_ARGUMENT", "a wrong key")
            self._send(b"")  # (an empty greeting: the client stops trying this address)
            self._close()
            return
        try:
            self._share.enter_context(self._lanes.share(self._client))
        except EngineError as exc:
            self._owner.refused(exc.code_name, str(exc))
            self._close()  # (no greeting: the client sends this call on a gRPC lane)
            return
        self.greeted = True
        self._send(self._lanes.node_name.encode())

    def _no_greeting(self) -> None:
        if not self.greeted and not self._ending:
            self._owner.refused("INVALID_ARGUMENT", f"no key within {GREETING_WAIT:g} s")
            self.cut()

    async def _answer(self, frame: bytes) -> None:
        try:
            call = _parse_call(frame)
            assert isinstance(call, (pb.LaneCall, MalformedRequest))
            answer = await self._lanes.answer(call, self._caller)
        except asyncio.CancelledError:
            self.call = None
            raise  # (the connection went: nothing to answer)
        except Exception:
            ref = uuid.uuid4().hex[:12]
            log.exception("rpc.crashed", rpc="DirectLane", ref=ref)
            self._lanes.count("DirectLane", "INTERNAL")
            answer = pb.LaneAnswer(
                code=grpc.StatusCode.INTERNAL.value[0],
                details=f"internal error (server log reference {ref})",
                last=True,
            )
        self.call = None
        answer.last = answer.last or self._owner.closing
        self._send(ANSWER + answer.SerializeToString())
        if answer.last:
            self._close()

    def _send(self, body: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(FRAME_HEADER.pack(len(body)) + body)

    def _end(self, why: str) -> None:
        """A client that broke the protocol: log it, close, cancel its call."""
        self._owner.refused("INVALID_ARGUMENT", why)
        self.cut()

    def _close(self) -> None:
        self._ending = True
        if self._transport is not None:
            self._transport.close()

"""A client's direct lanes: its task calls on bare loopback connections to the
node its gRPC connection reached (`orchestrator/api/direct_lanes.py` says why
and when a node offers them).

A gRPC lane's opening names the node's direct-lane address and key
(`sdk.lanes.DIRECT_LANE_METADATA`); `Lanes` uses them only when this client
reached the node on loopback without TLS. Each connection opens with the key
and must be answered with the node's name, the one the gRPC lane gave: so a
port that is not that node's (a tunnel's other end, another service on this
host) is never sent a call; one answered with an empty greeting (a wrong key:
another node now) is not tried again. Connections are kept for the next calls,
as gRPC streams are (`MAX_IDLE`).

A connection that ends before its call's answer does not say whether the node
took the call: the call then fails as on a gRPC stream the server cut
(UNAVAILABLE), and is sent again only where the node said that it took nothing
there (`NOT_TAKEN`: it closed the connection at a drain).
"""

from __future__ import annotations

import asyncio
import struct

from sdk.api.weft.v1 import lanes_pb2 as pb

FRAME_HEADER = struct.Struct(">I")
"""Each frame: its length in four bytes (big-endian), then that many bytes."""
MAX_IDLE = 16
"""Idle connections kept for the next calls (each holds one of this host's lanes)."""
ANSWER, NOT_TAKEN = b"\x01", b"\x00"
"""A frame after the greeting: `ANSWER` then a `LaneAnswer`, or `NOT_TAKEN`
alone (the node closed the connection and took no call on it)."""
GREETING_WAIT = 5.0
"""Seconds a new connection waits for the node's name before it is given up."""


class DirectUnavailable(Exception):
    """No direct lane took the call (nothing was sent on one): send it on a
    gRPC lane. `for_good`: the address is not the node's (or not there), so
    this client stops trying it; otherwise (the node refused this connection
    for the client's share of lanes, or is draining) only this call goes so."""

    def __init__(self, why: str, *, for_good: bool) -> None:
        super().__init__(why)
        self.for_good = for_good


class DirectLaneEnded(Exception):
    """The node ended a connection that had taken the call, before answering:
    as a gRPC stream cut by the server (UNAVAILABLE to the caller). `by_client`:
    this client closed it (`DirectLanes.close`), as a closed channel cancels
    its calls (CANCELLED)."""

    def __init__(self, why: str, *, by_client: bool = False) -> None:
        super().__init__(why)
        self.by_client = by_client


class _Link:
    """One connection: a call written, its answer read."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, max_frame: int
    ) -> None:
        self._reader, self._writer, self._max_frame = reader, writer, max_frame

    def send(self, body: bytes) -> None:
        self._writer.write(FRAME_HEADER.pack(len(body)) + body)

    async def receive(self) -> bytes | None:
        """The next frame; None if the node closed the connection (or sent a
        frame no answer can be: longer than the largest message)."""
        try:
            (size,) = FRAME_HEADER.unpack(await self._reader.readexactly(FRAME_HEADER.size))
            if size > self._max_frame:
                return None
            return await self._reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None

    def closed(self) -> bool:
        return self._writer.is_closing() or self._reader.at_eof()

    def close(self) -> None:
        self._writer.close()


class DirectLanes:
    """The direct lanes of one channel, to one node."""

    def __init__(self, address: str, key: str, node: str, max_frame: int) -> None:
        host, _, port = address.rpartition(":")
        self._host, self._port = host.strip("[]"), int(port)
        self._key, self._node, self._max_frame = key.encode(), node.encode(), max_frame
        self._idle: list[_Link] = []
        self._busy: set[_Link] = set()
        self._closed = False
        self._retired = False

    async def exchange(self, call: pb.LaneCall) -> pb.LaneAnswer:
        """The node's answer to `call`. `DirectUnavailable` if no connection took
        it; `DirectLaneEnded` if one may have, and ended before answering. A
        caller cancelled (its timeout) closes the connection: the node cancels
        the call."""
        body = call.SerializeToString()
        link = await self._take()
        try:
            frame = await self._on(link, body)
            if frame == NOT_TAKEN:
                # The node closed this idle connection (a drain) and said it took
                # nothing on it: the call goes on a new one, or a gRPC lane.
                self._let_go(link)
                link = await self._open()
                frame = await self._on(link, body)
                if frame == NOT_TAKEN:  # (the drain came between its greeting and the call)
                    raise DirectUnavailable("the node is draining", for_good=False)
        except BaseException:
            self._let_go(link)
            raise
        self._busy.discard(link)
        if frame is None or frame[:1] != ANSWER:  # (ended; or not taken on a new one)
            link.close()
            if self._closed:
                raise DirectLaneEnded("the client was closed", by_client=True)
            raise DirectLaneEnded("the server ended the direct lane")
        answer = pb.LaneAnswer.FromString(frame[1:])
        if answer.last or self._closed or self._retired or len(self._idle) >= MAX_IDLE:
            link.close()
        else:
            self._idle.append(link)
        return answer

    def retire(self) -> None:
        """Stop using these lanes (their address failed): close the idle
        connections; the busy ones close after their answers."""
        self._retired = True
        for link in self._idle:
            link.close()
        self._idle.clear()

    def close(self) -> None:
        """Close every connection; a call on one ends (`DirectLaneEnded`)."""
        self._closed = True
        for link in (*self._idle, *self._busy):
            link.close()
        self._idle.clear()
        self._busy.clear()

    def _let_go(self, link: _Link) -> None:
        link.close()
        self._busy.discard(link)

    async def _on(self, link: _Link, body: bytes) -> bytes | None:
        link.send(body)
        return await link.receive()

    async def _take(self) -> _Link:
        while self._idle:
            link = self._idle.pop()
            if not link.closed():
                self._busy.add(link)
                return link
            link.close()
        return await self._open()

    def is_closed(self) -> bool:
        """Whether `close` was called (a method: it may change across an await)."""
        return self._closed

    @property
    def busy(self) -> int:
        """Connections carrying a call now."""
        return len(self._busy)

    @property
    def idle(self) -> int:
        """Connections kept for the next calls."""
        return len(self._idle)

    async def _open(self) -> _Link:
        if self._closed:
            raise DirectLaneEnded("the client was closed", by_client=True)
        if self._retired:
            raise DirectUnavailable("these direct lanes were given up", for_good=False)
        try:
            reader, writer = await asyncio.open_connection(self._host, self._port)
        except OSError as exc:
            raise DirectUnavailable(f"cannot connect: {exc}", for_good=True) from exc
        if self.is_closed():  # (closed meanwhile: `close` could not reach this one)
            writer.close()
            raise DirectLaneEnded("the client was closed", by_client=True)
        link = _Link(reader, writer, self._max_frame)
        self._busy.add(link)  # (a close meanwhile closes it too)
        try:
            link.send(self._key)
            async with asyncio.timeout(GREETING_WAIT):
                greeting = await link.receive()
        except TimeoutError:
            self._let_go(link)
            raise DirectUnavailable("no greeting from the address", for_good=True) from None
        except BaseException:
            self._let_go(link)
            raise
        if greeting is None or greeting == NOT_TAKEN:  # (this host's share; or draining)
            self._let_go(link)
            raise DirectUnavailable("the server closed the new direct lane", for_good=False)
        if greeting != self._node:  # (empty: a wrong key; else another node or service)
            self._let_go(link)
            raise DirectUnavailable("another node answered the direct lane", for_good=True)
        if link not in self._busy:  # (the client was closed meanwhile: `close` took it)
            link.close()
            raise DirectLaneEnded("the client was closed", by_client=True)
        return link

"""A client's direct lanes: its task calls on bare loopback connections to the
node its gRPC connection reached (`orchestrator/api/direct_lanes.py` says why
and when a node offers them).

A gRPC lane's opening names the node's direct-lane address and key
(`sdk.lanes.DIRECT_LANE_METADATA`); `Lanes` uses them only when this client
reached the node on loopback without TLS. Each connection opens with the key
and must be answered with the node's name, the one the gRPC lane gave: so a
port that is not that node's (a tunnel's other end, another service on this
host) is never sent a call. Connections are kept for the next calls, as gRPC
streams are (`MAX_IDLE`).
"""

from __future__ import annotations

import asyncio
import struct

from sdk.api.weft.v1 import lanes_pb2 as pb

FRAME_HEADER = struct.Struct(">I")
"""Each frame: its length in four bytes (big-endian), then that many bytes."""
MAX_IDLE = 16
"""Idle connections kept for the next calls (each holds one of this host's lanes)."""
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

    async def exchange(self, call: pb.LaneCall) -> pb.LaneAnswer:
        """The node's answer to `call`. `DirectUnavailable` if no connection took
        it; `DirectLaneEnded` if one did and ended before answering. A caller
        cancelled (its timeout) closes the connection: the node cancels the call."""
        body = call.SerializeToString()
        link, reused = await self._take()
        try:
            answer = await self._on(link, body)
            if answer is None and reused:
                # The idle connection had ended (the node drained, or went)
                # before it took this call: the call goes on a new one.
                link.close()
                self._busy.discard(link)
                link = await self._open()
                answer = await self._on(link, body)
        except BaseException:
            link.close()
            self._busy.discard(link)
            raise
        self._busy.discard(link)
        if answer is None:
            link.close()
            if self._closed:
                raise DirectLaneEnded("the client was closed", by_client=True)
            raise DirectLaneEnded("the server ended the direct lane")
        if answer.last or len(self._idle) >= MAX_IDLE:
            link.close()
        else:
            self._idle.append(link)
        return answer

    def close(self) -> None:
        """Close every connection; a call on one ends (`DirectLaneEnded`)."""
        self._closed = True
        for link in (*self._idle, *self._busy):
            link.close()
        self._idle.clear()
        self._busy.clear()

    async def _on(self, link: _Link, body: bytes) -> pb.LaneAnswer | None:
        self._busy.add(link)
        link.send(body)
        frame = await link.receive()
        return None if frame is None else pb.LaneAnswer.FromString(frame)

    async def _take(self) -> tuple[_Link, bool]:
        if self._closed:
            raise DirectLaneEnded("the client was closed", by_client=True)
        while self._idle:
            link = self._idle.pop()
            if not link.closed():
                return link, True
            link.close()
        return await self._open(), False

    async def _open(self) -> _Link:
        try:
            reader, writer = await asyncio.open_connection(self._host, self._port)
        except OSError as exc:
            raise DirectUnavailable(f"cannot connect: {exc}", for_good=True) from exc
        link = _Link(reader, writer, self._max_frame)
        try:
            link.send(self._key)
            async with asyncio.timeout(GREETING_WAIT):
                greeting = await link.receive()
        except TimeoutError:
            link.close()
            raise DirectUnavailable("no greeting from the address", for_good=True) from None
        except BaseException:
            link.close()
            raise
        if greeting is None:  # closed at once: refused for this host's share, or draining
            link.close()
            raise DirectUnavailable("the server closed the new direct lane", for_good=False)
        if greeting != self._node:
            link.close()
            raise DirectUnavailable("another node answered the direct lane", for_good=True)
        return link

"""A worker's poll connections, spread over the processes that serve its address.

`weft server --workers N` runs N processes on one port, and the kernel hands
each new connection to one of them at random. A worker's polls wait in the
process their connection reached, and a commit hands a new task only to a poll
waiting in its own process: a task that no poll waits for there goes through
the database to another process (a row, a notification and a claim). Left to
chance, four connections put all of a worker's polls in one process of two one
time in eight, and three in one of them half the time.

So a worker asks each of its connections where it landed (a lane's opening
says: the process's node name, and how many processes serve the port) and dials
again in place of one that landed in a process holding its share already, until
each process holds its share or the tries run out. Against a server of one
process, or one that does not say, nothing more is dialled.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from sdk.client import AsyncClient
from sdk.lanes import Placement

TRIES = 4
"""Connections dialled, at most, per connection wanted."""


async def spread_connections(client: AsyncClient, wanted: int, into: list[AsyncClient]) -> None:
    """Add `wanted` connections like `client`'s (`AsyncClient.fork`) to `into`,
    spread evenly over the processes serving its address as far as `TRIES`
    allows. Whatever else was dialled is closed, a cancellation included; what
    is in `into` is the caller's to close."""
    dialled: list[AsyncClient] = []
    try:
        await _spread(client, wanted, into, dialled)
    finally:
        extra = [c for c in dialled if not any(c is kept for kept in into)]
        await asyncio.gather(*(c.close() for c in extra), return_exceptions=True)


async def _spread(
    client: AsyncClient, wanted: int, into: list[AsyncClient], dialled: list[AsyncClient]
) -> None:
    held: Counter[str] = Counter()
    surplus: list[AsyncClient] = []
    share = wanted  # until a connection says how many processes there are
    tries = TRIES * wanted
    while len(into) < wanted and tries > 0:
        batch = [client.fork() for _ in range(min(wanted - len(into), tries))]
        dialled.extend(batch)
        tries -= len(batch)
        places = await asyncio.gather(*(c.placement() for c in batch))
        processes = max((p.processes for p in places if p is not None), default=1)
        share = min(share, -(-wanted // max(1, min(processes, wanted))))  # (ceiling)
        for connection, place in zip(batch, places, strict=True):
            if _fits(place, held, share) and len(into) < wanted:
                into.append(connection)
                if place is not None:
                    held[place.node] += 1
            else:
                surplus.append(connection)
    into.extend(surplus[: wanted - len(into)])  # the tries ran out: as they landed


def _fits(place: Placement | None, held: Counter[str], share: int) -> bool:
    """Whether a connection that landed at `place` is wanted: its process holds
    fewer than its share (one that says nothing is taken as it is)."""
    return place is None or held[place.node] < share

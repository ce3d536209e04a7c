"""A worker's poll connections, spread over the processes that serve its address.

`weft server --workers N` runs N processes on one port, and the kernel hands
each new connection to one of them at random. A worker's polls wait in the
process their connection reached, and a commit hands a new task only to a poll
waiting in its own process: a task that no poll waits for there goes through
the database to another process (a row, a notification and a claim). Left to
chance, four connections put all of a worker's polls in one process of two one
time in eight, and three in one of them half the time.

So a worker asks where its connection landed (a lane's opening says: the
process's node name, and how many processes serve the port). Against several,
it dials its poll connections (one for each process, when there are more
processes than it wants connections, up to a bound), and dials again in place
of one that landed in a process holding its share already, until the processes
hold shares that differ by one at most, or the tries run out. Against one
process, or a server that does not say, the connections are dialled as they
are, and nothing more.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from sdk.client import AsyncClient
from sdk.lanes import Placement

TRIES = 4
"""Connections dialled, at most, per connection wanted."""


async def spread_connections(
    client: AsyncClient, wanted: int, into: list[AsyncClient], *, up_to: int = 0
) -> None:
    """Add `wanted` connections like `client`'s (`AsyncClient.fork`) to `into`,
    spread evenly over the processes serving its address as far as `TRIES`
    allows; against more processes than `wanted`, one for each, `up_to` at most
    (so that a poll waits in every process a commit may come to). Whatever else
    was dialled is closed, a cancellation included; what is in `into` is the
    caller's to close."""
    if wanted <= 1:  # (one connection is as good in any process)
        into.extend(client.fork() for _ in range(max(wanted, 0)))
        return
    place = await _placement(client)
    if place is None or place.processes <= 1:
        into.extend(client.fork() for _ in range(wanted))
        return
    wanted = max(wanted, min(place.processes, up_to))
    dialled: list[AsyncClient] = []
    try:
        await _spread(client, wanted, place.processes, into, dialled)
    finally:
        extra = [c for c in dialled if not any(c is kept for kept in into)]
        await asyncio.gather(*(c.close() for c in extra), return_exceptions=True)


async def _spread(
    client: AsyncClient,
    wanted: int,
    processes: int,
    into: list[AsyncClient],
    dialled: list[AsyncClient],
) -> None:
    shares = _Shares(wanted, processes)
    kept: list[tuple[AsyncClient, str]] = []
    fallback: list[tuple[AsyncClient, str]] = []  # landed where a share was full
    tries = TRIES * wanted
    while len(kept) < wanted and tries > 0:
        batch = [client.fork() for _ in range(min(wanted - len(kept), tries))]
        dialled.extend(batch)
        tries -= len(batch)
        places = await asyncio.gather(*(_placement(c) for c in batch))
        for connection, place in zip(batch, places, strict=True):
            # One that does not say (its probe timed out, say) is taken as it is:
            # dialling again for it could cost a wait per try.
            node = place.node if place is not None else ""
            if len(kept) < wanted and (place is None or shares.take(node)):
                kept.append((connection, node))
            else:
                fallback.append((connection, node))
        # Only as many kept in case as could still be wanted: the rest let go now
        # (each holds a lane, counted against this host's share of the server's).
        keep = wanted - len(kept)
        await asyncio.gather(*(c.close() for c, _ in fallback[keep:]), return_exceptions=True)
        del fallback[keep:]
    kept.extend(fallback[: wanted - len(kept)])  # the tries ran out: as they landed
    into.extend(_alternating(kept))


def _alternating(kept: list[tuple[AsyncClient, str]]) -> list[AsyncClient]:
    """The connections in an order that takes each process in turn (a, b, a,
    b): a worker's polls go to them in order, a task list's after another's,
    so that each task list's polls wait in as many processes as they can."""
    by_node: dict[str, list[AsyncClient]] = {}
    for connection, node in kept:
        by_node.setdefault(node, []).append(connection)
    queues = list(by_node.values())
    out: list[AsyncClient] = []
    while queues:
        out.extend(q.pop(0) for q in queues)
        queues = [q for q in queues if q]
    return out


async def _placement(client: AsyncClient) -> Placement | None:
    """Where `client`'s connection landed; None if the server did not say (or
    the asking failed: the connection is then as good as one of chance)."""
    try:
        return await client.placement()
    except Exception:  # (never a reason not to poll)
        return None


class _Shares:
    """How many connections each process may hold: `wanted` over `processes`,
    shares that differ by one at most (so with `wanted` = 4 and 3 processes, 2,
    1 and 1: never 2, 2 and 0)."""

    def __init__(self, wanted: int, processes: int) -> None:
        self._base, self._larger = divmod(wanted, min(processes, wanted))
        self._held: Counter[str] = Counter()

    def take(self, node: str) -> bool:
        """Whether a connection that landed in `node` is wanted there (then held)."""
        held = self._held[node]
        larger = sum(1 for n in self._held.values() if n > self._base)
        if held < self._base or (held == self._base and larger < self._larger):
            self._held[node] += 1
            return True
        return False

"""Long polls: hand a poller a task, or park it until a commit wakes it.

A parked poll costs nothing while idle: it waits on its wake-up ticket, and a
task list found empty is not looked at again until a commit adds to it (see
`wakeups.py`) or `SAFETY_NET` seconds pass. Each client may hold only so many
polls at once, so that one client cannot park enough of them to starve the
node for everyone else.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from orchestrator.engine.errors import ResourceExhausted

from .wakeups import Wakeups, wait_ticket

T = TypeVar("T")
# How long a list found empty is believed empty without a wake-up. Wake-ups are
# reliable (commits on this node, NOTIFY from others, everything after a lost
# link), so this only bounds what an unforeseen miss could cost.
SAFETY_NET = 30.0
DEFAULT_MAX_POLLS_PER_CLIENT = 1000


def client_of(peer: str) -> str:
    """The client a gRPC peer string names, without its port: a host's
    connections count together ("ipv4:10.0.0.5:4242" -> "ipv4:10.0.0.5")."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        host, _, _port = rest.rpartition(":")
        return f"{kind}:{host}"
    return peer


class LongPolls:
    def __init__(
        self, wakeups: Wakeups, max_per_client: int = DEFAULT_MAX_POLLS_PER_CLIENT
    ) -> None:
        self._wakeups = wakeups
        self.max_per_client = max_per_client
        self._per_client: Counter[str] = Counter()
        self.draining = False

    def parked(self, client: str) -> int:
        return self._per_client[client]

    @contextmanager
    def _slot(self, client: str) -> Iterator[None]:
        if self._per_client[client] >= self.max_per_client:
            raise ResourceExhausted(
                f"this client has {self.max_per_client} polls waiting already:"
                " the limit of concurrent polls per client"
            )
        self._per_client[client] += 1
        try:
            yield
        finally:
            self._per_client[client] -= 1
            if not self._per_client[client]:
                del self._per_client[client]

    async def poll(
        self,
        key: object,
        client: str,
        timeout: float,
        claim: Callable[[], Awaitable[T | None]],
    ) -> T | None:
        """Claim a task of `key`, or wait in line until one is committed, for up
        to `timeout` seconds; None if none came (or the node is draining)."""
        with self._slot(client):
            return await self._poll(key, timeout, claim)

    async def _poll(
        self, key: object, timeout: float, claim: Callable[[], Awaitable[T | None]]
    ) -> T | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        wakeups = self._wakeups
        ticket = None
        try:
            while not self.draining:
                ticket = wakeups.ticket(key)
                now = loop.time()
                if not wakeups.known_empty(key, now, SAFETY_NET):
                    generation = wakeups.generation(key)
                    got = await claim()
                    if got is not None:
                        return got
                    wakeups.found_empty(key, generation, loop.time())
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                await wait_ticket(ticket, min(remaining, SAFETY_NET))
                wakeups.leave(key, ticket)
            return None
        finally:
            if ticket is not None:
                wakeups.leave(key, ticket)
                # Woken during its last look, or as it was cancelled: that wake-up
                # may have been for a task it did not take, so the next in line looks.
                if ticket.done():
                    wakeups.wake_pollers(key)

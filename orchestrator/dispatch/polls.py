"""Long polls: hand a poller a task, or park it until a commit wakes it.

A parked poll costs nothing while idle: it waits on its wake-up ticket, and a
task list found empty is not looked at again until a commit adds to it (see
`wakeups.py`) or `SAFETY_NET` seconds pass. Each client may hold only so many
polls at once, so that one client cannot park enough of them to starve the
node for everyone else.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from orchestrator.engine.derived import TaskRef
from orchestrator.engine.errors import EngineError, ResourceExhausted
from orchestrator.engine.transition import Transition
from orchestrator.store.rows import TaskListKey

from .pollers import PollerSightings
from .wakeups import SAFETY_NET, Delivery, Ticket, Wakeups, wait_ticket

T = TypeVar("T")
DEFAULT_MAX_POLLS_PER_CLIENT = 1000


def client_of(peer: str) -> str:
    """The client a gRPC peer string names, without its port: a host's
    connections count together ("ipv4:10.0.0.5:4242" -> "ipv4:10.0.0.5")."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        host, _, _port = rest.rpartition(":")
        return f"{kind}:{host}"
    return peer


class ClientShares:
    """What each client holds at once (polls waiting, lanes open), up to
    `limit` per client (`--max-polls-per-client`), so that one client cannot
    take enough of them to starve the node for everyone else."""

    def __init__(self, limit: int, what: str) -> None:
        self.limit = limit
        self._what = what
        self._held: Counter[str] = Counter()

    def held(self, client: str) -> int:
        return self._held[client]

    def total(self) -> int:
        return self._held.total()

    def check(self, client: str) -> None:
        """RESOURCE_EXHAUSTED if `client` holds its limit already."""
        if self._held[client] >= self.limit:
            raise ResourceExhausted(
                f"this client has {self.limit} {self._what} already:"
                " the limit of concurrent polls per client"
            )

    @contextmanager
    def hold(self, client: str) -> Iterator[None]:
        """One more for `client` while the block runs (`check` first)."""
        self.check(client)
        self._held[client] += 1
        try:
            yield
        finally:
            self._held[client] -= 1
            if not self._held[client]:
                del self._held[client]


class LongPolls:
    def __init__(
        self,
        wakeups: Wakeups,
        max_per_client: int = DEFAULT_MAX_POLLS_PER_CLIENT,
        sightings: PollerSightings | None = None,
    ) -> None:
        self._wakeups = wakeups
        self._sightings = sightings or PollerSightings()
        self.max_per_client = max_per_client
        self._per_client = ClientShares(max_per_client, "polls waiting")
        self.draining = False

    def parked(self, client: str) -> int:
        return self._per_client.held(client)

    async def poll_task_list(
        self,
        key: TaskListKey,
        identity: str,
        peer: str,
        timeout: float,
        claim: Callable[[], Awaitable[T | None]],
        take: Callable[[Transition, int], T],
        cache_id: str = "",
    ) -> T | None:
        """A worker's poll (`peer` as gRPC names it): claim a task, or wait in
        line until a commit hands one over or wakes this poller to look, for up
        to `timeout` seconds (the long poll, or a folded poll's shorter wait).
        The poller is noted as seen on `key`."""
        self._sightings.note(key, identity, time.time())
        return await self.poll(key, client_of(peer), timeout, claim, take, cache_id)

    async def poll(
        self,
        key: TaskListKey,
        client: str,
        timeout: float,
        claim: Callable[[], Awaitable[T | None]],
        take: Callable[[Transition, int], T] | None = None,
        cache_id: str = "",
    ) -> T | None:
        """Claim a task of `key`, or wait in line until one is committed, for up
        to `timeout` seconds; None if none came (or the node is draining).

        With `take`, a commit on this node that adds a task to `key` may start
        it for this poller in its own write (`offer`), and the poll answers with
        what `take` returned; a decision task goes first to a poller whose
        `cache_id` holds its run."""
        with self._per_client.hold(client):
            return await self._poll(key, timeout, claim, take, cache_id)

    async def _poll(
        self,
        key: TaskListKey,
        timeout: float,
        claim: Callable[[], Awaitable[T | None]],
        take: Callable[[Transition, int], T] | None,
        cache_id: str,
    ) -> T | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        wakeups = self._wakeups
        ticket: Ticket | None = None
        # Woken to look, and not yet looked: a wake-up is a task committed
        # since, which this poller looks for whatever is known of the list (a
        # look that began before that commit may have found it empty), and
        # passes on if it leaves without looking.
        owed = False
        try:
            while not self.draining:
                # In line before looking, so a commit during the look wakes it;
                # but no task is handed to it until the look found none.
                ticket = wakeups.ticket(key)
                now = loop.time()
                if owed or not wakeups.known_empty(key, now, SAFETY_NET):
                    generation = wakeups.generation(key)
                    got = await claim()
                    owed = False
                    if got is not None:
                        return got
                    wakeups.found_empty(key, generation, loop.time())
                ticket.take, ticket.cache_id = take, cache_id
                remaining = deadline - loop.time()
                if remaining > 0:
                    await wait_ticket(ticket, min(remaining, SAFETY_NET))
                if ticket.taken and not ticket.done():
                    await ticket  # a commit is handing it a task: see how it ends
                delivered = _delivered(ticket)
                if delivered is not None:
                    value: T = delivered.value
                    return value
                if remaining <= 0:
                    return None
                owed = ticket.done()
                wakeups.leave(key, ticket)
                ticket = None  # (its wake-up, if any, is `owed` now)
            return None
        finally:
            # Woken during its last look, or as it was cancelled, or woken and
            # gone before its look: that wake-up may have been for a task it
            # did not take, so the next in line looks.
            woken = False
            if ticket is not None:
                wakeups.leave(key, ticket)
                woken = ticket.done() and not ticket.cancelled() and ticket.result() is None
            if woken or owed:
                wakeups.wake_pollers(key, int(woken) + int(owed))

    def offer(self, t: Transition, added: list[TaskRef]) -> Callable[[bool], None] | None:
        """Start each new task of `t` for a poller waiting on it here, in `t`
        itself: the write that made the task hands it over, with no task row and
        no claim. Returns how to settle with those pollers once the write is
        done: a committed write delivers, a failed one sends them to look."""
        handed: list[tuple[Ticket, object]] = []
        for ref in added:
            key = TaskListKey(t.state.namespace, ref.kind, ref.task_list)
            ticket = self._wakeups.taker(key, prefer=t.state.decider.cached_by)
            if ticket is None:
                continue
            assert ticket.take is not None
            try:
                handed.append((ticket, ticket.take(t, ref.scheduled_id)))
            except EngineError:
                handed.append((ticket, _NOTHING))  # it looks in the database instead
        if not handed:
            return None

        def settle(committed: bool) -> None:
            for ticket, value in handed:
                if not ticket.done():  # (a cancelled poll: its task waits for its timeout)
                    ok = committed and value is not _NOTHING
                    ticket.set_result(Delivery(value) if ok else None)

        return settle


_NOTHING = object()


def _delivered(ticket: Ticket) -> Delivery | None:
    if ticket.done() and not ticket.cancelled():
        result = ticket.result()
        if isinstance(result, Delivery):
            return result
    return None

"""Waking long polls the moment there is something for them.

Two kinds of waiter, woken differently:

* History followers of a run all want every new event, so a run's key has an
  event that wakes them all at once (`current` / `wake`); each follows inside
  `following`, so the event goes when the last of them leaves.
* Pollers of a task list each want one task, so they queue: a commit that
  adds n tasks wakes n pollers, not all of them (waking all made every parked
  poller run a claim for each task, costing the server far more than the task).
  A poller that leaves holding a wake-up it may not have acted on passes it to
  the next in line.

Either way a waiter registers *before* it looks in the database, so a wake-up
that lands between its look and its wait is never lost.

Every commit that adds tasks to a list wakes that list (here, or through
LISTEN/NOTIFY from another node), so a list found empty stays known empty until
a wake-up that no parked poller takes: parked polls cost no database look at
all. A wake-up a parked poller takes is that poller's to look for, whatever is
known of the list (`LongPolls` keeps this rule): a look begun before the commit
may note the list empty after it. The knowledge is dropped after a while anyway
(`SAFETY_NET`), and whenever the notification link was down (`wake_all`). What
is noted of lists nobody waits on is swept as lists come and go (`_sweep`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

from orchestrator.counting import holding

_PREFER_WITHIN = 64
# How long a list found empty is believed empty without a wake-up. Wake-ups are
# reliable (commits on this node, NOTIFY from others, everything after a lost
# link), so this only bounds what an unforeseen miss could cost.
SAFETY_NET = 30.0
# Lists come and go (one per run or per host, say): what is noted of each is
# swept once there are this many, and again each time their number doubles.
_SWEEP_FROM = 1024


@dataclass(frozen=True)
class Delivery:
    """A task handed straight to a waiting poller by the commit that made it."""

    value: Any


class Ticket(asyncio.Future[Delivery | None]):
    """A poller's place in line: done with None when it should look in the
    database, or with a `Delivery` when a commit handed it a task. `take` is how
    a committing transition starts a task for this poller (None: it takes none)."""

    take: Callable[[Any, int], Any] | None = None
    cache_id: str = ""
    """The poller's cache of runs: a decision task of a run it holds goes to it first."""
    taken: bool = False
    """Handed a task by a commit still in flight: wait for it before giving up."""
    queued: bool = False
    """Still in its list's queue. (Removing a ticket no longer there would cost a
    ValueError whose message is the future's repr: a measurable share of the
    server's CPU when every woken poll leaves.)"""


class Wakeups:
    def __init__(self) -> None:
        self._events: dict[Hashable, asyncio.Event] = {}
        self._followers: dict[Hashable, int] = {}
        self._pollers: dict[Hashable, deque[Ticket]] = {}
        # Per task list: the stamp of its last wake-up, and (that stamp, when)
        # as of the last look that found it empty. Stamps only grow, and a list
        # with none has `_floor`, which a sweep raises to the latest stamp: so
        # a list's stamp never comes back to a value a look may have taken
        # before a wake-up (`generation`), whatever a sweep forgot.
        self._generation: dict[Hashable, int] = {}
        self._empty: dict[Hashable, tuple[int, float]] = {}
        self._stamp = 0
        self._floor = 0
        self._sweep_at = _SWEEP_FROM

    # -- followers: wake all ----------------------------------------------------------

    @contextlib.contextmanager
    def following(self, key: Hashable) -> Iterator[None]:
        """A follower of `key` while inside: the key's event is dropped when the
        last one leaves (a read that never waited must not leave it behind)."""
        try:
            with holding(self._followers, key):
                yield
        finally:
            if key not in self._followers:
                self._events.pop(key, None)

    def followed(self) -> int:
        """How many keys have an event for followers."""
        return len(self._events)

    def current(self, key: Hashable) -> asyncio.Event:
        """The event that the next wake-up of `key` sets (call it `following`)."""
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = asyncio.Event()
        return event

    def wake(self, key: Hashable) -> None:
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    # -- pollers: wake one per task ---------------------------------------------------

    def ticket(self, key: Hashable, take: Callable[[Any, int], Any] | None = None) -> Ticket:
        """Join the queue of `key`; the ticket is done once this poller is woken."""
        ticket = Ticket(loop=asyncio.get_running_loop())
        ticket.take = take
        ticket.queued = True
        self._pollers.setdefault(key, deque()).append(ticket)
        return ticket

    def taker(self, key: Hashable, prefer: str = "") -> Ticket | None:
        """The longest-waiting poller of `key` that can take a task handed to it
        (one whose cache is `prefer` if any waits), off the queue: the caller
        delivers to it, or wakes it to look."""
        queue = self._pollers.get(key)
        if not queue:
            return None
        chosen: Ticket | None = None
        # The preferred poller is looked for among the first few in line only:
        # thousands of parked polls must not make every hand-off a long scan.
        for n, ticket in enumerate(queue):
            if ticket.done() or ticket.take is None:
                continue
            if chosen is None:
                chosen = ticket
            if not prefer or ticket.cache_id == prefer:
                chosen = ticket
                break
            if n >= _PREFER_WITHIN:
                break
        if chosen is None:
            return None
        queue.remove(chosen)
        chosen.queued = False
        chosen.taken = True
        if not queue:
            del self._pollers[key]
        return chosen

    def leave(self, key: Hashable, ticket: Ticket) -> None:
        queue = self._pollers.get(key)
        if queue is None or not ticket.queued:
            return  # already off the queue: woken, handed a task, or everyone woken
        ticket.queued = False
        with contextlib.suppress(ValueError):
            queue.remove(ticket)
        if not queue:
            del self._pollers[key]

    def wake_pollers(self, key: Hashable, n: int = 1) -> None:
        """Wake the `n` longest-waiting pollers of `key` (for `n` new tasks):
        each woken poller looks in the database (`LongPolls`). Only wake-ups
        left over, when fewer than `n` pollers waited (or `n` = 0), make the
        list not known empty, so that the next polls to come look instead: with
        every wake-up taken, the polls that come meanwhile park without a look,
        rather than all look for the same tasks (which, between nodes, cost a
        claim each and kept them from being handed tasks while they looked)."""
        queue = self._pollers.get(key)
        left = n
        while queue and left > 0:
            ticket = queue.popleft()
            ticket.queued = False
            if not ticket.done():
                ticket.set_result(None)
                left -= 1
        if queue is not None and not queue:
            del self._pollers[key]
        if left > 0 or n <= 0:
            self._stamp += 1
            self._generation[key] = self._stamp
            self._maybe_sweep()

    def waiting_pollers(self, key: Hashable) -> int:
        return len(self._pollers.get(key, ()))

    # -- what a look found --------------------------------------------------------------

    def generation(self, key: Hashable) -> int:
        """Taken before a look: `found_empty` then records it only if no wake-up
        left over came since (one a poller took, that poller looks for)."""
        return self._generation.get(key, self._floor)

    def found_empty(self, key: Hashable, generation: int, now: float) -> None:
        if self.generation(key) == generation:
            self._empty[key] = (generation, now)
            self._maybe_sweep(now)

    def known_empty(self, key: Hashable, now: float, max_age: float) -> bool:
        """Found empty within `max_age` seconds, and no wake-up left over since
        (a poller woken looks whatever this says)."""
        seen = self._empty.get(key)
        return seen is not None and seen[0] == self.generation(key) and now - seen[1] < max_age

    def noted(self) -> int:
        """How many task lists something is noted of (stamps and empty lists)."""
        return len(self._generation.keys() | self._empty.keys())

    def _maybe_sweep(self, now: float | None = None) -> None:
        if len(self._generation) + len(self._empty) > self._sweep_at:
            # (`now` is the loop's time: on asyncio's loop and on uvloop, the monotonic clock)
            self._sweep(time.monotonic() if now is None else now)
            self._sweep_at = max(_SWEEP_FROM, 2 * (len(self._generation) + len(self._empty)))

    def _sweep(self, now: float) -> None:
        """Forget the lists no poller waits on and not found empty within
        `SAFETY_NET` (a look would not trust that note anyway). A forgotten list
        has the floor's stamp, raised here: a look in flight on it finds its
        stamp changed and notes nothing (it looks again, at worst)."""
        floor, self._floor = self._floor, self._stamp
        for key in list(self._generation.keys() | self._empty.keys()):
            seen = self._empty.get(key)
            if key in self._pollers or (seen is not None and now - seen[1] < SAFETY_NET):
                # Kept as it was: a list never woken keeps the stamp it had.
                self._generation.setdefault(key, floor)
                continue
            self._generation.pop(key, None)
            self._empty.pop(key, None)

    # -- everyone ---------------------------------------------------------------------

    def wake_all(self) -> None:
        """Everyone looks again: after a lost connection, or when the server drains.
        Every list's stamp moves past any a look in flight took, so a look that
        read nothing before this (a notice may have been lost) notes nothing."""
        self._stamp += 1
        self._floor = self._stamp
        self._generation.clear()
        self._sweep_at = _SWEEP_FROM
        self._empty.clear()
        events, self._events = self._events, {}
        for event in events.values():
            event.set()
        queues, self._pollers = self._pollers, {}
        for queue in queues.values():
            for ticket in queue:
                ticket.queued = False
                if not ticket.done():
                    ticket.set_result(None)


async def wait(event: asyncio.Event, timeout: float) -> bool:
    """True if woken, False on timeout."""
    if timeout <= 0:
        return event.is_set()
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        return False
    return True


async def wait_ticket(ticket: asyncio.Future[Any], timeout: float) -> bool:
    """True if woken, False on timeout. The ticket itself is never cancelled, so a
    wake-up that lands as the timeout fires is still seen by the caller."""
    if timeout <= 0 or ticket.done():
        return ticket.done()
    # What `asyncio.wait([ticket], timeout=…)` does, without its sets, its
    # coroutine and its checks: a parked poll pays this once per task it gets.
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(timeout, wake)
    ticket.add_done_callback(wake)
    try:
        await waiter  # (a cancelled caller cancels the waiter, never the ticket)
    finally:
        timer.cancel()
        ticket.remove_done_callback(wake)
    return ticket.done()

"""Runs this node holds in memory: each open run's state as of the version it
last read or wrote, and the tail of its history this node wrote since. A run
that closes leaves (`put`, `wrote`); the rest are bounded in number and in
bytes, least recently used first.

The database stays the truth: a write goes through only if the row still has
the version cached here (compare-and-set), so a stale entry costs one retry,
never a wrong write. Transitions of one run on this node take turns (one lock
per run), so the state object is never changed by two at once.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from orchestrator.counting import holding
from orchestrator.engine.state import RunState
from sdk.api.weft.v1 import history_pb2 as h

MAX_RUNS = 10_000
# What all runs may hold, in the bytes their state and events take serialized
# (in memory, as Python objects, several times that): a run's data is bounded
# by the per-run limits, not by what the node can hold, so the cache is.
MAX_BYTES = 64 * 1024 * 1024
# The tail kept per run: enough for the events since the previous decision task
# of any ordinary run; a longer gap, or a larger one, is read from the database.
MAX_TAIL = 256
MAX_TAIL_BYTES = 1024 * 1024


@dataclass
class CachedRun:
    state: RunState
    version: int
    state_bytes: int
    """The state's size as JSON (what the run row holds)."""
    tail: list[h.HistoryEvent] = field(default_factory=list, init=False)
    """The last events of the run, contiguous up to its last event (maybe none)."""
    _sizes: list[int] = field(default_factory=list, init=False)
    tail_bytes: int = field(default=0, init=False)

    @property
    def weight(self) -> int:
        return self.state_bytes + self.tail_bytes

    def add_events(self, events: list[h.HistoryEvent]) -> None:
        if not events:
            return
        if self.tail and self.tail[-1].event_id + 1 != events[0].event_id:
            self.tail, self._sizes, self.tail_bytes = [], [], 0
        sizes = [e.ByteSize() for e in events]
        self.tail.extend(events)
        self._sizes.extend(sizes)
        self.tail_bytes += sum(sizes)
        drop = 0
        while drop < len(self.tail) and (
            len(self.tail) - drop > MAX_TAIL or self.tail_bytes > MAX_TAIL_BYTES
        ):
            self.tail_bytes -= self._sizes[drop]
            drop += 1
        if drop:
            del self.tail[:drop]
            del self._sizes[:drop]

    def events(self, first_id: int, last_id: int) -> list[h.HistoryEvent] | None:
        """Events first_id..last_id from the tail, or None if it does not hold them all."""
        if not self.tail or first_id < self.tail[0].event_id or last_id > self.tail[-1].event_id:
            return None
        start = first_id - self.tail[0].event_id
        return self.tail[start : start + last_id - first_id + 1]


class RunCache:
    def __init__(self, max_runs: int = MAX_RUNS, max_bytes: int = MAX_BYTES) -> None:
        self._runs: OrderedDict[str, CachedRun] = OrderedDict()
        self._max = max_runs
        self._max_bytes = max_bytes
        self.bytes = 0
        """The weight of the runs held (`CachedRun.weight`)."""
        self._locks: dict[str, asyncio.Lock] = {}
        self._holders: dict[str, int] = {}
        self.hits = 0
        self.misses = 0

    def get(self, run_id: str) -> CachedRun | None:
        entry = self._runs.get(run_id)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._runs.move_to_end(run_id)
        return entry

    def peek(self, run_id: str) -> CachedRun | None:
        return self._runs.get(run_id)

    def put(self, run_id: str, entry: CachedRun) -> None:
        """Hold `entry` (read or just created); a closed run is not held: it hands
        out no more tasks, and calls on it are rare (late answers, reads)."""
        self.evict(run_id)
        if not entry.state.is_open:
            return
        self._runs[run_id] = entry
        self.bytes += entry.weight
        self._trim()

    def wrote(
        self, run_id: str, entry: CachedRun, events: list[h.HistoryEvent], state_bytes: int
    ) -> None:
        """This node wrote `entry`'s run: its version is the next, `events` were
        appended and its state is `state_bytes` long now. (An entry that left
        the cache meanwhile is brought up to date, and stays out; a run the
        write closed leaves, as in `put`.)"""
        if not entry.state.is_open:
            self.evict(run_id)
            return
        held = self._runs.get(run_id) is entry
        if held:
            self.bytes -= entry.weight
            self._runs.move_to_end(run_id)
        entry.version += 1
        entry.state_bytes = state_bytes
        entry.add_events(events)
        if held:
            self.bytes += entry.weight
            self._trim()

    def evict(self, run_id: str) -> None:
        entry = self._runs.pop(run_id, None)
        if entry is not None:
            self.bytes -= entry.weight

    def clear(self) -> None:
        self._runs.clear()
        self.bytes = 0

    def _trim(self) -> None:
        """Least recently used runs leave until the cache is within its bounds
        (the run just used stays, whatever it weighs)."""
        while len(self._runs) > self._max or (self.bytes > self._max_bytes and len(self._runs) > 1):
            _, entry = self._runs.popitem(last=False)
            self.bytes -= entry.weight

    @asynccontextmanager
    async def turn(self, run_id: str) -> AsyncIterator[None]:
        """This node's turn at the run: one transition of it at a time."""
        lock = self._locks.get(run_id)
        if lock is None:
            lock = self._locks[run_id] = asyncio.Lock()
        try:
            with holding(self._holders, run_id):
                async with lock:
                    yield
        finally:
            if run_id not in self._holders:  # nobody holds or waits: forget the lock
                del self._locks[run_id]

    def busy(self, run_id: str) -> bool:
        return run_id in self._holders

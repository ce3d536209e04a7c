"""A decider's cache of runs: each run's history as of the last decision task
this worker completed for it, and the views folded from it.

The server sends a decision task of a cached run with only the events since
that task (`first_event_id` > 1); the worker adds them to the history and to
the fold instead of decoding and folding the whole history again, so a task
costs the same at event 10 and at event 10,000. The cache is bounded in runs
and in bytes (least recently used runs leave first), and a run closed by its
task is not kept; a run it does not hold, or holds as of another task than the
server thinks, is read whole, as without a cache.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from sdk.events import Event
from sdk.history import Fold

DEFAULT_SIZE = 1000
# What the runs held may weigh together, in their events' bytes as the server
# sent them (decoded, several times that): a run's history is bounded by the
# service's per-run limits, not by what one worker can hold for all its runs.
DEFAULT_BYTES = 64 * 1024 * 1024


@dataclass
class CachedRun:
    history: list[Event]
    started_event_id: int
    """The DeciderStarted of the task the history ends at."""
    fold: Fold = field(default_factory=Fold)
    size: int = 0
    """The history's events in bytes, as the server sent them."""


class RunCache:
    def __init__(self, size: int = DEFAULT_SIZE, max_bytes: int = DEFAULT_BYTES) -> None:
        if size < 1:
            raise ValueError("a run cache holds at least one run")
        if max_bytes < 1:
            raise ValueError("a run cache's bytes must be positive (a size of 0: no cache)")
        self.id = uuid.uuid4().hex
        """Sent with polls and answers: the server knows which runs this cache holds."""
        self._runs: OrderedDict[str, CachedRun] = OrderedDict()
        self._size = size
        self._max_bytes = max_bytes
        self.bytes = 0
        """What the runs held weigh (`CachedRun.size`)."""
        self.hits = 0
        self.misses = 0

    def take(self, run_id: str, previous_started_event_id: int) -> CachedRun | None:
        """The run, off the cache (a task that fails must not leave half of its
        events in it), if it is held as of `previous_started_event_id`."""
        entry = self._pop(run_id)
        if entry is None or entry.started_event_id != previous_started_event_id:
            self.misses += 1
            return None
        self.hits += 1
        return entry

    def keep(self, run_id: str, entry: CachedRun) -> None:
        """As a task of the run is answered: the history as of that task. The
        least recently used runs leave while the cache holds too many or weighs
        too much (the run kept now stays, whatever it weighs)."""
        self._pop(run_id)
        self._runs[run_id] = entry
        self.bytes += entry.size
        while len(self._runs) > self._size or (
            self.bytes > self._max_bytes and len(self._runs) > 1
        ):
            _, gone = self._runs.popitem(last=False)
            self.bytes -= gone.size

    def forget(self, run_id: str, entry: CachedRun) -> None:
        """A task's answer was not taken: drop `entry`, which `keep` held for it,
        if it is still what the cache holds of the run (a later task, or a
        later attempt of the same one, may have kept another since)."""
        if self._runs.get(run_id) is entry:
            self._pop(run_id)

    def _pop(self, run_id: str) -> CachedRun | None:
        entry = self._runs.pop(run_id, None)
        if entry is not None:
            self.bytes -= entry.size
        return entry

    def __len__(self) -> int:
        return len(self._runs)

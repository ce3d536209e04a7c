"""A decider's cache of runs: each run's history as of the last decision task
this worker completed for it, and the views folded from it.

The server sends a decision task of a cached run with only the events since
that task (`first_event_id` > 1); the worker adds them to the history and to
the fold instead of decoding and folding the whole history again, so a task
costs the same at event 10 and at event 10,000. The cache is bounded (least
recently used runs leave first); a run it does not hold, or holds as of another
task than the server thinks, is read whole, as without a cache.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

from sdk.events import Event
from sdk.history import Fold

DEFAULT_SIZE = 1000


@dataclass
class CachedRun:
    history: list[Event]
    started_event_id: int
    """The DeciderStarted of the task the history ends at."""
    fold: Fold = field(default_factory=Fold)


class RunCache:
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if size < 1:
            raise ValueError("a run cache holds at least one run")
        self.id = uuid.uuid4().hex
        """Sent with polls and answers: the server knows which runs this cache holds."""
        self._runs: OrderedDict[str, CachedRun] = OrderedDict()
        self._size = size
        self.hits = 0
        self.misses = 0

    def take(self, run_id: str, previous_started_event_id: int) -> CachedRun | None:
        """The run, off the cache (a task that fails must not leave half of its
        events in it), if it is held as of `previous_started_event_id`."""
        entry = self._runs.pop(run_id, None)
        if entry is None or entry.started_event_id != previous_started_event_id:
            self.misses += 1
            return None
        self.hits += 1
        return entry

    def keep(self, run_id: str, entry: CachedRun) -> None:
        """As a task of the run is answered: the history as of that task."""
        self._runs[run_id] = entry
        self._runs.move_to_end(run_id)
        while len(self._runs) > self._size:
            self._runs.popitem(last=False)

    def forget(self, run_id: str, started_event_id: int) -> None:
        """A task's answer was not taken: drop what `keep` held for it, the run
        as of `started_event_id` (a later task of the run may have carried the
        same entry on since: that one stays)."""
        entry = self._runs.get(run_id)
        if entry is not None and entry.started_event_id == started_event_id:
            del self._runs[run_id]

    def __len__(self) -> int:
        return len(self._runs)

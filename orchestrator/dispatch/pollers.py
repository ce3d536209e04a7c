"""Who polls which task list, for `DescribeTaskList`.

Sightings are kept in memory and written in one batch every `FLUSH_EVERY`
seconds, never by the poll itself: a write per poll would cost more than the
poll, and a client inventing a new identity for every poll could otherwise turn
its polls into a stream of database writes. `DescribeTaskList` reads the rows
of every node and adds this node's sightings not yet written.
"""

from __future__ import annotations

from orchestrator.store.rows import TaskListKey

FLUSH_EVERY = 5.0
# A sighting is news only if older than this; more often is the same answer.
REFRESH = 10.0
MAX_SIGHTINGS = 20_000


class PollerSightings:
    def __init__(self, max_sightings: int = MAX_SIGHTINGS) -> None:
        self._seen: dict[tuple[TaskListKey, str], float] = {}
        self._unwritten: set[tuple[TaskListKey, str]] = set()
        self._max = max_sightings

    def note(self, key: TaskListKey, identity: str, at: float) -> None:
        """`identity` polled `key` at `at` (epoch seconds)."""
        item = (key, identity)
        last = self._seen.get(item)
        if last is not None and at - last < REFRESH:
            return
        if last is None and len(self._seen) >= self._max:
            self._forget_oldest()
        self._seen[item] = at
        self._unwritten.add(item)

    def take_unwritten(self) -> list[tuple[TaskListKey, str, float]]:
        """The sightings to write now (each once)."""
        out = [(key, identity, self._seen[(key, identity)]) for key, identity in self._unwritten]
        self._unwritten.clear()
        return out

    def put_back(self, rows: list[tuple[TaskListKey, str, float]]) -> None:
        """A write failed (the database is away): try these again next time."""
        for key, identity, _ in rows:
            if (key, identity) in self._seen:
                self._unwritten.add((key, identity))

    def recent(self, key: TaskListKey, since: float) -> dict[str, float]:
        return {i: at for (k, i), at in self._seen.items() if k == key and at >= since}

    def recent_in(self, namespace: str, since: float) -> list[tuple[TaskListKey, str, float]]:
        """(task list, identity, when) of the namespace's sightings since `since`."""
        return [
            (k, i, at)
            for (k, i), at in self._seen.items()
            if k.namespace == namespace and at >= since
        ]

    def latest(self, keys: set[TaskListKey]) -> dict[TaskListKey, float]:
        """The latest sighting on each of `keys` that has one (one pass over all
        sightings, however many keys: `weft doctor` asks about hundreds)."""
        out: dict[TaskListKey, float] = {}
        for (key, _), at in self._seen.items():
            if key in keys and at > out.get(key, 0.0):
                out[key] = at
        return out

    def _forget_oldest(self) -> None:
        # Written ones first: an unwritten sighting is the only record of that poller.
        by_age = sorted(self._seen.items(), key=lambda kv: (kv[0] in self._unwritten, kv[1]))
        for item, _ in by_age[: max(1, len(by_age) // 10)]:
            del self._seen[item]
            self._unwritten.discard(item)

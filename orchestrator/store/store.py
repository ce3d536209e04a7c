"""The store: every write to a run goes through here.

The hot path, for a transition of one run (an answer, a heartbeat, a signal, a
claim, a start):

    this node's turn at the run -> its state from the cache (or one read)
    -> engine -> hand new tasks to pollers waiting here -> one write of the
    run row, its events and its task and deadline rows, on condition that the
    row is still at the version read -> tell the dispatcher

On PostgreSQL that write is one call of a server-side function (one round trip;
under load several runs' calls share one, in one transaction: group commit in
`pg_writer.py`); a version that moved means another node wrote first, and the
command is applied again to the fresh state. A transition that reaches other
runs (locks, signals between runs, children, a parent) is applied again under
row locks instead (`locked.py`). Only this package imports SQLAlchemy; database
errors become domain errors here.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TypeVar, cast

from orchestrator.engine import derived
from orchestrator.engine.errors import (
    Aborted,
    AlreadyExists,
    EngineError,
    FailedPrecondition,
    NotFound,
)
from orchestrator.engine.state import RunKey, RunState
from orchestrator.engine.transition import Transition, apply
from sdk.api.weft.v1 import history_pb2 as h

from . import dialect, migrate
from .cache import CachedRun
from .credentials import Credentials
from .diagnostics import Diagnostics
from .locked import LockedWrites
from .nodes import Nodes
from .notices import NOTIFY_CHANNEL
from .pg_writer import PgWriter
from .rows import Committed, DueDeadline, RunRow, TaskListKey, utcnow
from .schedules import Schedules
from .sqlite_writer import SqliteWriter
from .upkeep_writes import UpkeepWrites
from .workers import WorkerSessions
from .writes import Before, Candidate, Conflict, multi_run, plan

__all__ = [
    "NOTIFY_CHANNEL",
    "Committed",
    "DueDeadline",
    "Offer",
    "RunRow",
    "Store",
    "TaskListKey",
]

T = TypeVar("T")
# Another node wrote the run between our read and our write: try again on its
# state, up to this many times.
_CAS_ATTEMPTS = 20
_CLAIM_CANDIDATES = 8

Settle = Callable[[bool], None]
Offer = Callable[[Transition, list[derived.TaskRef]], Settle | None]
"""Given a transition and the tasks it adds, start those that a poller waiting
on this node can take (in the transition itself), and return how to tell those
pollers whether the write committed."""


def _take(fn: Callable[[Transition, int], T], scheduled_id: int, t: Transition) -> T:
    return fn(t, scheduled_id)


class _Lost:
    """The run's version moved under us."""


_LOST = _Lost()


class Store(LockedWrites, UpkeepWrites):
    _hot: PgWriter | SqliteWriter
    credentials: Credentials
    workers: WorkerSessions
    nodes: Nodes
    diagnostics: Diagnostics
    schedules: Schedules

    @classmethod
    async def open(
        cls,
        url: str,
        on_commit: Callable[[Committed], None] = lambda c: None,
        offer: Offer | None = None,
        *,
        group_commit: bool = True,
    ) -> Store:
        dialect.async_url(url)  # refuse an unsupported URL before touching anything
        sqlite_path = dialect.sqlite_path(url)
        await asyncio.to_thread(migrate.upgrade, url)
        store = cls(dialect.create_engine(url), on_commit)
        store._offer = offer
        store.credentials = Credentials(store)
        store.workers = WorkerSessions(store)
        store.nodes = Nodes(store)
        store.diagnostics = Diagnostics(store)
        store.schedules = Schedules(store)
        if store.is_pg:
            store._hot = PgWriter(dialect.libpq_url(url), store.stats, grouping=group_commit)
        else:
            assert sqlite_path is not None
            store._hot = SqliteWriter(store, sqlite_path)
        return store

    async def close(self) -> None:
        try:
            await self._hot.close()
        finally:  # the pool's connections go even when the hot path's close fails
            await super().close()

    def set_offer(self, offer: Offer | None) -> None:
        self._offer = offer

    # -- existing runs ---------------------------------------------------------------

    async def transact(self, run_id: str, fn: Callable[[Transition], T]) -> T:
        """Apply one engine command to an existing run, atomically."""
        for _ in range(_CAS_ATTEMPTS):
            async with self.cache.turn(run_id):
                out = await self._hot_transact(run_id, fn, None)
            if not isinstance(out, _Lost):
                return cast(T, out)  # None only for a request id, and there is none
        raise Aborted(f"run {run_id} changed concurrently too often: try again")

    async def transact_once(
        self, run_id: str, kind: str, request_id: str, fn: Callable[[Transition], T]
    ) -> T | None:
        """`transact`, recording `request_id` in the same write so that a retry
        appends nothing (it answers None). Nothing is read first: a request id
        seen before is a unique key the write runs into."""
        if not request_id:
            return await self.transact(run_id, fn)
        keys: list[RunKey] = []  # the run's, once read (a refused run is not cached)

        def keyed(t: Transition) -> T:
            keys.append(t.state.key)
            return fn(t)

        for _ in range(_CAS_ATTEMPTS):
            async with self.cache.turn(run_id):
                try:
                    out = await self._hot_transact(run_id, keyed, (kind, request_id))
                except Conflict:
                    return None  # done before: by an earlier try of the same request
                except EngineError:
                    # E.g. the run has closed since: if this request was applied
                    # before it did, the retry is answered as the first try was.
                    key = keys[-1] if keys else await self._run_key(run_id)
                    if await self.request_run(key.namespace, key.workflow_id, kind, request_id):
                        return None
                    raise
            if not isinstance(out, _Lost):
                return out
        raise Aborted(f"run {run_id} changed concurrently too often: try again")

    async def _entry(self, run_id: str) -> tuple[CachedRun, bool]:
        """The run as this node holds it, and whether that came from the cache
        (and so may be out of date) rather than from the database just now."""
        entry = self.cache.get(run_id)
        if entry is not None:
            return entry, True
        row = await self._hot.load(run_id)
        if row is None:
            raise NotFound(f"run {run_id} not found")
        entry = CachedRun(RunState.from_json(row[0]), row[1], len(row[0]))
        self.cache.put(run_id, entry)
        return entry, False

    async def _current(self, entry: CachedRun) -> bool:
        """Whether the run is still at the version this node holds (one small
        read, where reading the run again would fetch its whole state)."""
        return await self._hot.version(entry.state.run_id) == entry.version

    async def _run_key(self, run_id: str) -> RunKey:
        entry, _ = await self._entry(run_id)
        return entry.state.key

    async def _hot_transact(
        self,
        run_id: str,
        fn: Callable[[Transition], T],
        once: tuple[str, str] | None,
    ) -> T | _Lost | None:
        """One try, holding this node's turn at the run. `once`: (kind, request
        id) recorded with the write (None comes back for a request seen before)."""
        entry, cached = await self._entry(run_id)
        s = entry.state
        request = (s.namespace, s.workflow_id, *once) if once is not None else None
        before = Before.of(entry.state)
        t = Transition(entry.state, utcnow())
        try:
            result = apply(t, fn)
        except EngineError as exc:
            if not exc.touched_state and (not cached or await self._current(entry)):
                raise  # refused on the run as it stands, and left as it was: kept
            self.cache.evict(run_id)  # the command may have left the state half changed
            if cached:
                return _LOST  # refused on what may be an old copy: ask the database
            raise
        except BaseException:
            self.cache.evict(run_id)
            raise
        if not (t.events or t.state_changed):
            return result
        if multi_run(t, before):
            self.cache.evict(run_id)
            if once is not None:
                return await self.locked_transact_once(run_id, *once, fn)
            return await self.locked_transact(run_id, fn)
        return await self._commit(entry, t, before, result, request)

    async def _commit(
        self,
        entry: CachedRun,
        t: Transition,
        before: Before,
        result: T,
        request: tuple[str, str, str, str] | None,
    ) -> T | _Lost:
        run_id = t.state.run_id  # (the request tuple is recorded with the write)
        settle: Settle | None = None
        try:
            # (Inside: whatever raises before the write must still settle the
            # hand-off and drop the cached state, which `t` changed in place.)
            settle = self._hand_off(t, before)
            committed = Committed()
            write = plan(t, before, entry.version, self.node_id, committed, request)
            ok, cancelled = await self._hot.submit(write).seen()
        except BaseException:
            self.cache.evict(run_id)
            if settle is not None:
                settle(False)
            raise
        if not ok:
            self.stats.lost_writes += 1
            self.cache.evict(run_id)
            if settle is not None:
                settle(False)
            return _LOST
        self.cache.wrote(run_id, entry, write.events, len(write.state_json))
        if settle is not None:
            settle(True)
        self._on_commit(committed)
        if cancelled:
            raise asyncio.CancelledError
        return result

    def _hand_off(self, t: Transition, before: Before) -> Settle | None:
        """Offer the transition's new tasks to pollers waiting on this node: a
        task one takes is started in this same write and never becomes a row."""
        if self._offer is None or not t.state.is_open:
            return None
        added = sorted(derived.tasks(t.state) - before.tasks, key=lambda r: r.scheduled_id)
        return self._offer(t, added) if added else None

    # -- new runs --------------------------------------------------------------------

    async def create(
        self,
        namespace: str,
        workflow_id: str,
        new_run_id: str,
        request_id: str,
        fn: Callable[[Transition], T],
        on_open: Callable[[Transition], T] | None = None,
    ) -> tuple[str, T | None, bool]:
        """Open a new run of `workflow_id`, or (with `on_open`) apply that to the open run.

        A repeated `request_id` answers with the run it started and changes
        nothing. Returns (run id, result, whether a run was started). The new
        run is written at once; only if the workflow id is taken (an open run,
        or the request id used before) is anything read.
        """
        request = (namespace, workflow_id, "start", request_id) if request_id else None
        for _ in range(_CAS_ATTEMPTS):
            state = RunState.blank(RunKey(namespace, workflow_id, new_run_id))
            before = Before.of(state)
            t = Transition(state, utcnow())
            result = apply(t, fn)
            settle: Settle | None = None
            try:
                settle = self._hand_off(t, before)
                committed = Committed()
                write = plan(t, before, 0, self.node_id, committed, request)
                _, cancelled = await self._hot.submit(write).seen()
            except Conflict:
                if settle is not None:
                    settle(False)
                taken = await self._taken(namespace, workflow_id, request_id, on_open)
                if taken is not None:
                    return taken
                continue  # the open run closed meanwhile: start anew
            except BaseException:
                if settle is not None:
                    settle(False)
                raise
            entry = CachedRun(t.state, 1, len(write.state_json))
            entry.add_events(write.events)
            self.cache.put(new_run_id, entry)
            if settle is not None:
                settle(True)
            self._on_commit(committed)
            if cancelled:
                raise asyncio.CancelledError
            return new_run_id, result, True
        raise Aborted(f"workflow {workflow_id!r} changed concurrently too often: try again")

    async def _taken(
        self,
        namespace: str,
        workflow_id: str,
        request_id: str,
        on_open: Callable[[Transition], T] | None,
    ) -> tuple[str, T | None, bool] | None:
        """After a start lost to a unique key: the answer, or None to try again."""
        if request_id:
            prior = await self.request_run(namespace, workflow_id, "start", request_id)
            if prior is not None:
                return prior, None, False
        open_id = await self.open_run(namespace, workflow_id)
        if open_id is None:
            return None
        if on_open is None:
            raise AlreadyExists(f"workflow {workflow_id!r} is already running (run {open_id})")
        try:
            result = await self.transact_once(open_id, "start", request_id, on_open)
        except NotFound:
            return None
        return open_id, result, False

    # -- handing out tasks -----------------------------------------------------------

    async def claim(
        self, namespace: str, kind: str, task_list: str, fn: Callable[[Transition, int], T]
    ) -> T | None:
        """Hand the oldest task of a task list that can be had to one poller,
        appending its *Started event; None if there is none.

        The task rows come from the database; a task another poller took first
        makes `fn` refuse (NotFound) on the run's current state, and the next one
        is tried. A run this node is busy with is passed over for now.
        """
        for _ in range(_CAS_ATTEMPTS):
            found = await self._hot.candidates(namespace, kind, task_list, _CLAIM_CANDIDATES)
            if not found:
                return None
            # Runs this node is not busy with first; a busy one waits its turn.
            found.sort(key=lambda row: self.cache.busy(row.run_id))
            for row in found:
                if self._taken_already(row):
                    continue
                try:
                    take = functools.partial(_take, fn, row.scheduled_id)
                    return await self.transact(row.run_id, take)
                except (NotFound, FailedPrecondition):
                    continue  # taken, or its run closed or is gone
        return None

    def _taken_already(self, row: Candidate) -> bool:
        """Whether this node's copy of the run, as new as the task row or newer,
        shows the task handed out already (by a commit here since the row was
        read): then there is nothing to try."""
        entry = self.cache.peek(row.run_id)
        # A run this node is writing holds a state that may not land.
        if entry is None or entry.version < row.version or self.cache.busy(row.run_id):
            return False
        return not any(ref.scheduled_id == row.scheduled_id for ref in derived.tasks(entry.state))

    # -- the hot path's reads ----------------------------------------------------------

    def cached_events(
        self, run_id: str, first_id: int, last_id: int
    ) -> list[h.HistoryEvent] | None:
        """Events first_id..last_id if this node holds them all in memory (it
        wrote them), else None."""
        entry = self.cache.peek(run_id)
        held = entry.events(first_id, last_id) if entry is not None else None
        return list(held) if held is not None else None

    async def events_between(
        self, run_id: str, first_id: int, last_id: int
    ) -> list[h.HistoryEvent]:
        """Events first_id..last_id, from this node's memory when it has them."""
        if first_id > last_id:
            return []
        held = self.cached_events(run_id, first_id, last_id)
        if held is not None:
            return held
        return [
            h.HistoryEvent.FromString(data)
            for data in await self._hot.events(run_id, first_id, last_id)
        ]

"""What the run cache keeps: an open run's state and tail after each write, and
nothing of a run once it has closed (a late call on it reads the database); a
run's tail and the whole cache bounded in bytes."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from orchestrator.engine.errors import FailedPrecondition, ResourceExhausted, untouched
from orchestrator.engine.external import signal, terminate
from orchestrator.engine.limits import Limits
from orchestrator.engine.start import StartCommand, start_workflow
from orchestrator.engine.state import RunKey, RunState
from orchestrator.engine.transition import Transition
from orchestrator.store import cache
from orchestrator.store.cache import CachedRun, RunCache
from orchestrator.store.store import Store
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import history_pb2 as h

START = StartCommand("t", "", "tl", None, execution_timeout=60, decider_timeout=10)


def _signal(size: int) -> Callable[[Transition], None]:
    def apply(t: Transition) -> None:
        signal(t, "poke", c.Payload(data=b"x" * size, encoding="json"), "test", Limits())

    return apply


async def test_a_run_leaves_the_cache_when_it_closes(db_url: str) -> None:
    store = await Store.open(db_url)
    try:
        run_id = str(uuid.uuid4())
        await store.create("default", "wf", run_id, "", lambda t: start_workflow(t, START))
        started = store.cache.peek(run_id)
        assert started is not None and started.version == 1

        await store.transact(run_id, _signal(10))
        open_entry = store.cache.peek(run_id)
        assert open_entry is not None and open_entry.version == 2
        assert open_entry.tail[-1].HasField("signal")
        assert store.cache.bytes == open_entry.weight > 0

        await store.transact(run_id, lambda t: terminate(t, "done", None, "test"))
        assert store.cache.peek(run_id) is None and store.cache.bytes == 0

        # A late call is answered from the database, and leaves nothing cached;
        # one with a request id reads the run once too.
        with pytest.raises(FailedPrecondition):
            await store.transact(run_id, _signal(10))
        assert store.cache.peek(run_id) is None
        misses = store.cache.misses
        with pytest.raises(FailedPrecondition):
            await store.transact_once(run_id, "signal", "late", _signal(10))
        assert store.cache.peek(run_id) is None and store.cache.misses == misses + 1
        assert store.cache.bytes == 0
        last = (await store.events_between(run_id, 1, 4))[-1]
        assert last.HasField("workflow_terminated")
    finally:
        await store.close()


async def test_a_run_of_large_events_keeps_a_tail_of_bounded_bytes(db_url: str) -> None:
    store = await Store.open(db_url)
    try:
        run_id = str(uuid.uuid4())
        await store.create("default", "wf", run_id, "", lambda t: start_workflow(t, START))
        big = 200 * 1024  # under the payload limit; 6 of them pass the tail's bound
        for _ in range(8):
            await store.transact(run_id, _signal(big))
        entry = store.cache.peek(run_id)
        assert entry is not None
        assert entry.tail_bytes <= cache.MAX_TAIL_BYTES < entry.tail_bytes + big
        ids = [e.event_id for e in entry.tail]
        assert ids == list(range(ids[0], 11)) and len(ids) == 5  # contiguous, to the last
        assert store.cache.bytes == entry.weight
        # Events that left the tail come from the database, whole.
        assert store.cached_events(run_id, 3, 10) is None
        events = await store.events_between(run_id, 3, 10)
        assert [e.event_id for e in events] == list(range(3, 11))
        assert all(len(e.signal.input.data) == big for e in events)
    finally:
        await store.close()


def _entry(run_id: str, events: int, size: int) -> CachedRun:
    state = RunState.blank(RunKey("default", run_id, run_id))
    entry = CachedRun(state, 1, len(state.to_json()))
    entry.add_events(
        [
            h.HistoryEvent(event_id=n, signal=h.SignalAttributes(input=c.Payload(data=b"x" * size)))
            for n in range(1, events + 1)
        ]
    )
    return entry


def test_the_least_recently_used_runs_leave_when_the_cache_is_over_its_bytes() -> None:
    one = _entry("a", 10, 1000).weight
    runs = RunCache(max_runs=100, max_bytes=3 * one)
    for run_id in "abc":
        runs.put(run_id, _entry(run_id, 10, 1000))
    assert runs.bytes == 3 * one
    assert runs.get("a") is not None  # now the most recently used
    runs.put("d", _entry("d", 10, 1000))
    assert [r for r in "abcd" if runs.peek(r)] == ["a", "c", "d"] and runs.bytes == 3 * one

    # A write that grows a run is counted, and makes room the same way; the run
    # written is the most recently used, whatever was used while it wrote.
    d = runs.peek("d")
    assert d is not None
    assert runs.get("a") is not None and runs.get("c") is not None
    extra = [
        h.HistoryEvent(event_id=11, signal=h.SignalAttributes(input=c.Payload(data=b"y" * 5000)))
    ]
    runs.wrote("d", d, extra, d.state_bytes + 10)
    assert d.version == 2 and d.tail[-1].event_id == 11
    kept = runs.peek("c")
    assert kept is not None
    assert [r for r in "acd" if runs.peek(r)] == ["c", "d"]
    assert runs.bytes == kept.weight + d.weight

    # A run that left meanwhile is brought up to date but not counted again.
    runs.evict("d")
    runs.wrote("d", d, [], d.state_bytes)
    assert runs.bytes == kept.weight and runs.peek("d") is None and d.version == 3

    # One run heavier than the whole cache still stays: it is in use.
    runs.put("e", _entry("e", 10, 10_000))
    assert runs.peek("e") is not None and runs.bytes > 3 * one


def test_a_tail_is_bounded_in_events_and_restarts_after_a_gap() -> None:
    entry = _entry("a", cache.MAX_TAIL + 10, 10)
    assert [e.event_id for e in entry.tail] == list(range(11, cache.MAX_TAIL + 11))
    assert entry.tail_bytes == sum(e.ByteSize() for e in entry.tail)
    entry.add_events([h.HistoryEvent(event_id=cache.MAX_TAIL + 20)])
    assert [e.event_id for e in entry.tail] == [cache.MAX_TAIL + 20]
    assert entry.tail_bytes == entry.tail[0].ByteSize()


def _refuse(touched: bool) -> Callable[[Transition], None]:
    def apply(t: Transition) -> None:
        error = ResourceExhausted("at a limit")
        if not touched:
            raise untouched(error)
        t.state.workflow_id = "changed before the refusal"
        raise error

    return apply


async def test_a_refusal_that_changed_nothing_keeps_a_current_copy(db_url: str) -> None:
    """A run refused on this node's current copy (a version read says so) is
    neither dropped nor read again; one refused on a copy another node has moved
    past is read again and refused on what the database holds; and a refusal
    that may have changed the state drops the copy, as before."""
    store, other = await Store.open(db_url), await Store.open(db_url)
    try:
        run_id = str(uuid.uuid4())
        await store.create("default", "wf", run_id, "", lambda t: start_workflow(t, START))
        held = store.cache.peek(run_id)
        misses = store.cache.misses
        with pytest.raises(ResourceExhausted):
            await store.transact(run_id, _refuse(touched=False))
        assert store.cache.peek(run_id) is held and store.cache.misses == misses

        await other.transact(run_id, _signal(10))  # (another node moves the run on)
        with pytest.raises(ResourceExhausted):
            await store.transact(run_id, _refuse(touched=False))
        fresh = store.cache.peek(run_id)
        assert fresh is not None and fresh is not held and fresh.version == 2
        assert store.cache.misses == misses + 1

        with pytest.raises(ResourceExhausted):
            await store.transact(run_id, _refuse(touched=True))
        assert store.cache.peek(run_id) is None
        entry, _ = await store._entry(run_id)
        assert entry.state.workflow_id == "wf"  # (the change before the refusal was not kept)
    finally:
        await store.close()
        await other.close()

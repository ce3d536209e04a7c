"""History follows on a real store: a read of a closed run, or one that waited
and was woken, leaves nothing in the wake-ups behind it."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from orchestrator.dispatch import follow
from orchestrator.dispatch.follow import follow_key, tail
from orchestrator.dispatch.wakeups import Wakeups
from orchestrator.dispatch.wakeups import wait as wakeups_wait
from orchestrator.engine.external import signal, terminate
from orchestrator.engine.limits import Limits
from orchestrator.engine.start import StartCommand, start_workflow
from orchestrator.store.store import Store
from sdk.api.weft.v1 import history_pb2 as h

START = StartCommand("t", "", "tl", None, execution_timeout=60, decider_timeout=10)


async def test_reads_and_follows_leave_no_wake_up_behind(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The follower must be woken by the commit, not find the event by re-reading.
    monkeypatch.setattr(follow, "RECHECK", 30.0)
    parked = asyncio.Event()

    async def waiting(event: asyncio.Event, timeout: float) -> bool:
        parked.set()
        return await wakeups_wait(event, timeout)

    monkeypatch.setattr(follow, "wait", waiting)
    store, wakeups = await Store.open(db_url), Wakeups()
    try:
        run_id = str(uuid.uuid4())
        await store.create("default", "wf", run_id, "", lambda t: start_workflow(t, START))

        async def read(first_id: int, wait_new: bool) -> tuple[list[h.HistoryEvent], bool]:
            return await tail(store, wakeups, run_id, first_id, 100, 1 << 20, wait_new, 20.0, bool)

        events, _ = await read(1, wait_new=False)
        assert len(events) == 2 and wakeups.followed() == 0

        # A follower waits for the next event, and is woken by its commit.
        follower = asyncio.ensure_future(read(3, wait_new=True))
        await asyncio.wait_for(parked.wait(), 10)
        assert not follower.done() and wakeups.followed() == 1
        await store.transact(run_id, lambda t: signal(t, "go", None, "test", Limits()))
        wakeups.wake(follow_key(run_id))
        events, _ = await follower
        assert [e.event_id for e in events] == [3] and wakeups.followed() == 0

        # A follow of a closed run returns at once, and leaves nothing either.
        await store.transact(run_id, lambda t: terminate(t, "done", None, "test"))
        events, more = await read(5, wait_new=True)
        assert events == [] and not more and wakeups.followed() == 0
    finally:
        await store.close()

"""What the run cache keeps: an open run's state and tail after each write, and
nothing of a run once it has closed (a late call on it reads the database)."""

from __future__ import annotations

import uuid

import pytest

from orchestrator.engine.errors import FailedPrecondition
from orchestrator.engine.external import signal, terminate
from orchestrator.engine.limits import Limits
from orchestrator.engine.start import StartCommand, start_workflow
from orchestrator.engine.transition import Transition
from orchestrator.store.store import Store


async def test_a_run_leaves_the_cache_when_it_closes(db_url: str) -> None:
    store = await Store.open(db_url)
    try:
        cmd = StartCommand("t", "", "tl", None, execution_timeout=60, decider_timeout=10)
        run_id = str(uuid.uuid4())
        await store.create("default", "wf", run_id, "", lambda t: start_workflow(t, cmd))
        started = store.cache.peek(run_id)
        assert started is not None and started.version == 1

        def poke(t: Transition) -> None:
            signal(t, "poke", None, "test", Limits())

        await store.transact(run_id, poke)
        open_entry = store.cache.peek(run_id)
        assert open_entry is not None and open_entry.version == 2
        assert open_entry.tail[-1].HasField("signal")

        await store.transact(run_id, lambda t: terminate(t, "done", None, "test"))
        assert store.cache.peek(run_id) is None

        # A late call is answered from the database, and leaves nothing cached.
        with pytest.raises(FailedPrecondition):
            await store.transact(run_id, poke)
        assert store.cache.peek(run_id) is None
        last = (await store.events_between(run_id, 1, 4))[-1]
        assert last.HasField("workflow_terminated")
    finally:
        await store.close()

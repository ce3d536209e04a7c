"""Deadline scanners skip a run another transaction holds instead of queueing on
it (PostgreSQL), and fire it once it is free."""

from __future__ import annotations

import uuid

from sqlalchemy import create_engine, text

from orchestrator.engine.start import StartCommand, start_workflow
from orchestrator.engine.transition import Transition
from orchestrator.store import migrate
from orchestrator.store.store import Store


async def test_a_held_run_is_skipped_then_applied(postgres_url: str) -> None:
    store = await Store.open(postgres_url)
    try:
        cmd = StartCommand("t", "", "tl", None, execution_timeout=60, decider_timeout=10)
        run_id = str(uuid.uuid4())
        await store.create("default", "wf", run_id, "", lambda t: start_workflow(t, cmd))

        def touch(t: Transition) -> int:
            return t.state.next_event_id

        holder = create_engine(migrate.sync_url(postgres_url))
        with holder.connect() as conn:
            conn.execute(text("SELECT 1 FROM runs WHERE run_id = :r FOR UPDATE"), {"r": run_id})
            assert await store.transact_unless_busy(run_id, touch) is None
            conn.rollback()
        holder.dispose()
        assert await store.transact_unless_busy(run_id, touch) == 3
    finally:
        await store.close()

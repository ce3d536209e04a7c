"""The deadline scanner's pass: one read says what is due and when to look next
(the first deadline not yet due, or a due one that could not fire), on both
databases."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import create_engine, text

from orchestrator.engine.start import StartCommand, start_workflow
from orchestrator.metrics import Metrics
from orchestrator.store import migrate
from orchestrator.store.store import Store
from orchestrator.timers.scanner import DeadlineScanner


async def _start(store: Store, execution_timeout: float) -> str:
    cmd = StartCommand("t", "", "tl", None, execution_timeout, decider_timeout=3600)
    run_id = str(uuid.uuid4())
    await store.create("default", f"wf-{run_id}", run_id, "", lambda t: start_workflow(t, cmd))
    return run_id


async def _status(store: Store, run_id: str) -> str:
    return (await store.load_state(run_id)).status


async def test_a_pass_fires_what_is_due_and_says_when_the_next_comes_in_one_read(
    db_url: str,
) -> None:
    store = await Store.open(db_url)
    scanner = DeadlineScanner(store, Metrics())
    try:
        assert await scanner.fire_due() == (0, None)  # no deadline at all

        soon = await _start(store, execution_timeout=0.2)
        later = await _start(store, execution_timeout=3600)
        due_later = (await store.earliest_deadlines(10))[-1].due
        assert due_later > datetime.now(UTC) + timedelta(minutes=59)

        before = store.stats.statements
        [first] = await store.earliest_deadlines(1)
        one_read = store.stats.statements - before
        assert await scanner.fire_due() == (0, first.due)
        assert store.stats.statements - before == 2 * one_read  # nothing due: one read

        await asyncio.sleep(0.3)
        fired, nxt = await scanner.fire_due()
        assert (fired, nxt) == (1, due_later)
        assert await _status(store, soon) == "timed_out"
        assert await _status(store, later) == "open"
    finally:
        await store.close()


async def test_a_due_deadline_that_cannot_fire_is_looked_at_again_soon(
    postgres_url: str,
) -> None:
    store = await Store.open(postgres_url)
    scanner = DeadlineScanner(store, Metrics())
    try:
        held = await _start(store, execution_timeout=0.1)
        await _start(store, execution_timeout=3600)
        await asyncio.sleep(0.2)
        [busy] = [d for d in await store.earliest_deadlines(10) if d.run_id == held]

        # Another transaction holds the run: its deadline is due but cannot fire,
        # so the pass says to look again at its due time (already past), not at
        # the next one an hour away.
        holder = create_engine(migrate.sync_url(postgres_url))
        with holder.connect() as conn:
            conn.execute(text("SELECT 1 FROM runs WHERE run_id = :r FOR UPDATE"), {"r": held})
            assert await scanner.fire_due() == (0, busy.due)
            conn.rollback()
        holder.dispose()

        fired, nxt = await scanner.fire_due()
        assert fired == 1 and nxt is not None and nxt > datetime.now(UTC) + timedelta(minutes=59)
        assert await _status(store, held) == "timed_out"
    finally:
        await store.close()

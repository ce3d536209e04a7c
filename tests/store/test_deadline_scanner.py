"""The deadline scanner: one read a pass says what is due and when to look next
(the first deadline not yet due, or a due one that could not fire); a deadline
hinted while a pass runs sets the next look without starting passes at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from sqlalchemy import create_engine, text

from orchestrator.engine.errors import Unavailable
from orchestrator.engine.start import StartCommand, start_workflow
from orchestrator.metrics import Metrics
from orchestrator.store import migrate
from orchestrator.store.store import DueDeadline, Store
from orchestrator.timers import scanner as scanner_module
from orchestrator.timers.scanner import DeadlineScanner
from tests.helpers import wait_until


@asynccontextmanager
async def _scanning(url: str) -> AsyncIterator[tuple[Store, DeadlineScanner]]:
    store = await Store.open(url)
    try:
        yield store, DeadlineScanner(store, Metrics())
    finally:
        await store.close()


async def _start(store: Store, execution_timeout: float) -> str:
    cmd = StartCommand("t", "", "tl", None, execution_timeout, decider_timeout=3600)
    run_id = str(uuid.uuid4())
    await store.create("default", f"wf-{run_id}", run_id, "", lambda t: start_workflow(t, cmd))
    return run_id


async def _due(store: Store, run_id: str) -> datetime:
    far = datetime.now(UTC) + timedelta(days=1)
    [row] = [d for d in await store.deadlines_due_and_next(far, 100) if d.run_id == run_id]
    return row.due


async def _overdue(store: Store) -> str:
    """A run whose execution timeout is already past."""
    run_id = await _start(store, execution_timeout=0.05)
    due = await _due(store, run_id)

    async def past() -> bool:
        return datetime.now(UTC) > due

    await wait_until(past, timeout=10)
    return run_id


async def _status(store: Store, run_id: str) -> str:
    return (await store.load_state(run_id)).status


async def _timed_out(store: Store, run_id: str) -> bool:
    return await _status(store, run_id) == "timed_out"


async def test_a_pass_fires_what_is_due_and_says_when_the_next_comes_in_one_read(
    db_url: str,
) -> None:
    async with _scanning(db_url) as (store, scanner):
        assert await scanner.fire_due() == (0, None)  # no deadline at all

        later = await _start(store, execution_timeout=3600)
        due_later = await _due(store, later)
        before = store.stats.statements
        await store.deadlines_due_and_next(datetime.now(UTC), 1)
        one_read = store.stats.statements - before
        assert await scanner.fire_due() == (0, due_later)
        assert store.stats.statements - before == 2 * one_read  # nothing due: one read
        assert one_read > 0  # (the counting works)

        soon = await _overdue(store)
        assert await scanner.fire_due() == (1, due_later)
        assert await _status(store, soon) == "timed_out"
        assert await _status(store, later) == "open"


async def test_more_due_than_a_read_brings_all_fire_in_one_pass(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scanner_module, "_BATCH", 2)
    async with _scanning(db_url) as (store, scanner):
        overdue = [await _overdue(store) for _ in range(5)]
        async with asyncio.timeout(10):  # (a pass that reads again without end fails here)
            assert await scanner.fire_due() == (5, None)
        assert [await _status(store, r) for r in overdue] == ["timed_out"] * 5


async def test_a_due_deadline_that_cannot_fire_is_looked_at_again_soon(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scanner_module, "_BATCH", 2)
    holder = create_engine(migrate.sync_url(postgres_url))
    try:
        async with _scanning(postgres_url) as (store, scanner):
            held = [await _overdue(store) for _ in range(3)]
            await _start(store, execution_timeout=3600)
            first_due = await _due(store, held[0])

            # Other transactions hold the runs: their deadlines are due but
            # cannot fire, so the pass (which reads them all: a whole batch that
            # did not move is not read again) says to look again at the first
            # one's due time, already past, not at the next one an hour away.
            with holder.connect() as conn:
                for run_id in held:
                    conn.execute(
                        text("SELECT 1 FROM runs WHERE run_id = :r FOR UPDATE"), {"r": run_id}
                    )
                async with asyncio.timeout(10):
                    assert await scanner.fire_due() == (0, first_due)
                conn.rollback()

            fired, nxt = await scanner.fire_due()
            assert fired == 3 and nxt is not None
            assert nxt > datetime.now(UTC) + timedelta(minutes=59)
            assert [await _status(store, r) for r in held] == ["timed_out"] * 3
    finally:
        holder.dispose()


async def test_a_deadline_hinted_during_a_pass_is_looked_at_when_due_and_no_sooner(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long recheck: a pass that comes before it can only be a hint's doing.
    monkeypatch.setattr(scanner_module, "_IDLE_RECHECK", 30.0)
    async with _scanning(db_url) as (store, scanner):
        await _start(store, execution_timeout=3600)
        reads = 0
        soon: list[str] = []
        read = store.deadlines_due_and_next

        async def counted(*args: Any) -> Any:
            nonlocal reads
            reads += 1
            rows = await read(*args)
            # Commits on this node after the pass's read, as under load: one
            # sooner than every deadline the read saw (only its hint can bring
            # it in), and many an hour away, which must not start passes at once.
            if not soon:
                soon.append(await _start(store, execution_timeout=0.5))
                scanner.hint((await _due(store, soon[0])).timestamp())
            for _ in range(20):
                scanner.hint(datetime.now(UTC).timestamp() + 3600)
            return rows

        async def soon_timed_out() -> bool:
            return bool(soon) and await _timed_out(store, soon[0])

        monkeypatch.setattr(store, "deadlines_due_and_next", counted)
        task = asyncio.create_task(scanner.run())
        try:
            await wait_until(soon_timed_out, timeout=10)
            # The first pass, the one at the hinted due time, and at most one
            # more if the engine found it a hair early.
            assert reads <= 3
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_a_pass_that_fails_keeps_its_hints_and_the_next_pass_fires(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scanner_module, "_IDLE_RECHECK", 30.0)
    async with _scanning(db_url) as (store, scanner):
        soon: list[str] = []
        read = store.deadlines_due_and_next

        async def failing_once(*args: Any) -> Any:
            if not soon:
                # The database goes away during the first pass, after a commit
                # here made a deadline that pass cannot have seen.
                soon.append(await _start(store, execution_timeout=0.5))
                scanner.hint((await _due(store, soon[0])).timestamp())
                raise OSError("connection lost")
            return await read(*args)

        async def soon_timed_out() -> bool:
            return bool(soon) and await _timed_out(store, soon[0])

        monkeypatch.setattr(store, "deadlines_due_and_next", failing_once)
        task = asyncio.create_task(scanner.run())
        try:
            await wait_until(soon_timed_out, timeout=10)  # (the recheck alone: 30 s)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


def _failures(scanner: DeadlineScanner) -> float:
    return sum(
        sample.value
        for metric in scanner._metrics.deadlines_failed.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


async def test_due_rows_that_cannot_fire_hide_nothing_and_are_tried_again_less_often(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More rows that can never fire than a read brings, due before a good one.
    monkeypatch.setattr(scanner_module, "_BATCH", 2)
    # (A first back-off long enough for the pass's own work on a loaded machine.)
    monkeypatch.setattr(scanner_module, "_RETRY_FIRST", 0.3)
    editor = create_engine(migrate.sync_url(db_url))
    try:
        async with _scanning(db_url) as (store, scanner):
            broken = [await _overdue(store) for _ in range(3)]
            good = await _overdue(store)
            with editor.begin() as conn:  # runs whose state the engine cannot read
                kept = {
                    r: conn.scalar(text("SELECT state FROM runs WHERE run_id = :r"), {"r": r})
                    for r in broken
                }
                for run_id in broken:
                    conn.execute(
                        text("UPDATE runs SET state = 'not json' WHERE run_id = :r"), {"r": run_id}
                    )

            fired, nxt = await scanner.fire_due()
            assert fired == 1 and await _timed_out(store, good)
            assert _failures(scanner) == 3
            # The next look is their next try, soon: not the past due time of a
            # row that failed (a pass every few milliseconds), nor none at all.
            assert nxt is not None and nxt > datetime.now(UTC)
            assert nxt < datetime.now(UTC) + timedelta(seconds=2)

            # Before that, a pass reads them but does not try them again.
            tries: list[str] = []
            transact = store.transact_unless_busy

            async def counted(run_id: str, fn: Any) -> Any:
                tries.append(run_id)
                return await transact(run_id, fn)

            monkeypatch.setattr(store, "transact_unless_busy", counted)
            assert (await scanner.fire_due())[0] == 0
            assert _failures(scanner) == 3 and tries == []

            # Each failure doubles the wait before the next try.
            def all_tried_again() -> float:
                until = max(f.retry_at for f in scanner._failing.values())
                return max(0.0, (until - datetime.now(UTC)).total_seconds())

            waits = []
            ref = (broken[0], "workflow", 1)
            for _ in range(3):
                await asyncio.sleep(all_tried_again())
                tried = datetime.now(UTC)
                await scanner.fire_due()
                waits.append((scanner._failing[ref].retry_at - tried).total_seconds())
            assert _failures(scanner) == 12
            assert waits[1] > 1.5 * waits[0] and waits[2] > 1.5 * waits[1]

            # Mended, they fire at their next try, and are forgotten.
            with editor.begin() as conn:
                for run_id, state in kept.items():
                    conn.execute(
                        text("UPDATE runs SET state = :s WHERE run_id = :r"),
                        {"s": state, "r": run_id},
                    )
            await asyncio.sleep(all_tried_again())
            assert await scanner.fire_due() == (3, None)
            assert [await _status(store, r) for r in broken] == ["timed_out"] * 3
            assert scanner._failing == {}
    finally:
        editor.dispose()


async def test_more_rows_than_a_read_brings_with_one_due_time_all_fire(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows that share their due time (timers one decision started together):
    # the pass reads on after the last row of a page, not after its due time.
    monkeypatch.setattr(scanner_module, "_BATCH", 2)
    editor = create_engine(migrate.sync_url(db_url))
    try:
        async with _scanning(db_url) as (store, scanner):
            overdue = [await _overdue(store) for _ in range(7)]
            with editor.begin() as conn:
                conn.execute(text("UPDATE deadlines SET due = (SELECT MIN(due) FROM deadlines)"))
            assert (
                len({d.due for d in await store.deadlines_due_and_next(datetime.now(UTC), 9)}) == 1
            )
            async with asyncio.timeout(10):
                assert await scanner.fire_due() == (7, None)
            assert [await _status(store, r) for r in overdue] == ["timed_out"] * 7
    finally:
        editor.dispose()


async def test_a_row_another_node_fired_is_no_failure_but_one_out_of_step_is(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    editor = create_engine(migrate.sync_url(db_url))
    try:
        async with _scanning(db_url) as (store, scanner):
            other = DeadlineScanner(store, Metrics())  # another node's scanner
            raced = await _overdue(store)
            read = store.deadlines_due_and_next

            async def read_then_lose_the_race(*args: Any) -> Any:
                rows = await read(*args)
                monkeypatch.setattr(store, "deadlines_due_and_next", read)
                await other.fire_due()  # fires the row after this pass read it
                return rows

            monkeypatch.setattr(store, "deadlines_due_and_next", read_then_lose_the_race)
            fired, nxt = await scanner.fire_due()
            assert fired == 0 and await _timed_out(store, raced)
            assert nxt is not None and nxt < datetime.now(UTC) + timedelta(seconds=1)
            assert await scanner.fire_due() == (0, None)  # gone: nothing failed
            assert _failures(scanner) == 0 and scanner._failing == {}

            # A row its run does not have (a hand edit, a bug): not due at its
            # first try, again at its second, and from then on a failure.
            run_id = await _start(store, execution_timeout=3600)
            with editor.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO deadlines (run_id, kind, ref_id, due)"
                        " VALUES (:r, 'timer', 999, :due)"
                    ),
                    {"r": run_id, "due": datetime(2020, 1, 1)},
                )
            _, nxt = await scanner.fire_due()
            assert _failures(scanner) == 0
            assert nxt is not None and nxt < datetime.now(UTC) + timedelta(seconds=1)
            await asyncio.sleep(max(0.0, (nxt - datetime.now(UTC)).total_seconds()))
            _, nxt = await scanner.fire_due()
            assert (
                _failures(scanner) == 1 and scanner._failing[(run_id, "timer", 999)].attempts == 2
            )
            assert await _status(store, run_id) == "open"
    finally:
        editor.dispose()


async def test_a_failing_rows_back_off_outlasts_a_busy_try_and_an_outage_adds_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scanner = DeadlineScanner(cast(Store, None), Metrics())  # (`_fire` stands in below)
    outcomes: list[Any] = [
        OSError("unreadable"),  # a failure: try again in 50 ms
        None,  # busy: the back-off stays
        Unavailable("database unavailable"),  # an outage: a second, nothing counted
        OSError("unreadable"),  # the second failure: 100 ms
    ]

    async def fire(row: Any) -> Any:
        return outcomes.pop(0)

    monkeypatch.setattr(scanner, "_fire", fire)
    row = DueDeadline("r", "timer", 7, datetime.now(UTC) - timedelta(seconds=1))
    ref = ("r", "timer", 7)

    async def attempt() -> datetime | None:
        failing = scanner._failing.get(ref)
        now = failing.retry_at if failing is not None else datetime.now(UTC)
        return await scanner._fire_unless_failing(row, now)

    await attempt()
    first = scanner._failing[ref]
    assert first.attempts == 1 and _failures(scanner) == 1
    assert await attempt() == row.due and scanner._failing[ref] == first  # busy
    began = datetime.now(UTC)
    await attempt()
    outage = scanner._failing[ref]
    assert outage.attempts == 1 and _failures(scanner) == 1
    assert timedelta(seconds=0.9) < outage.retry_at - began < timedelta(seconds=2)
    ended = datetime.now(UTC)
    await attempt()
    second = scanner._failing[ref]
    assert second.attempts == 2 and _failures(scanner) == 2
    # (From the try's end: 0.1 s after it, not before.)
    assert timedelta(seconds=0.1) <= second.retry_at - ended < timedelta(seconds=1)

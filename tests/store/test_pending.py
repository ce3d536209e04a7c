"""`Pending`: a write's outcome reaches its caller even when the caller was
cancelled meanwhile (a client that went away), and only a write that was
itself cut off (the loop closing) ends in CancelledError."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from orchestrator.engine.errors import Unavailable
from orchestrator.store import pg_writer
from orchestrator.store.pending import Pending, drive
from orchestrator.store.rows import DbStats
from orchestrator.store.writes import RunWrite


async def _write(gate: asyncio.Event, result: bool) -> bool:
    await gate.wait()
    return result


async def test_a_caller_cancelled_meanwhile_still_gets_the_outcome() -> None:
    gate = asyncio.Event()
    pending = drive(_write(gate, True))
    caller = asyncio.ensure_future(pending.seen())
    await asyncio.sleep(0)
    caller.cancel()  # (the client went away)
    await asyncio.sleep(0.01)
    assert not caller.done(), "the caller stopped waiting before the write ended"
    caller.cancel()  # (again: still waits)
    await asyncio.sleep(0.01)
    gate.set()
    assert await caller == (True, True)


async def test_an_uncancelled_caller_gets_the_outcome_alone() -> None:
    gate = asyncio.Event()
    gate.set()
    assert await drive(_write(gate, False)).seen() == (False, False)


async def test_the_write_s_error_is_raised_to_its_caller() -> None:
    async def failing() -> bool:
        raise LookupError("no such run")

    with pytest.raises(LookupError, match="no such run"):
        await drive(failing()).seen()


async def _ended(task: asyncio.Future[Any]) -> asyncio.Future[Any]:
    """`task`, once done; a failure if it is not within 5 s (`seen` outlives a
    cancellation, so `wait_for` could not cut a hung one short)."""
    await asyncio.wait({task}, timeout=5)
    assert task.done(), "the caller is still waiting"
    return task


async def test_a_write_cut_off_itself_ends_its_caller_cancelled() -> None:
    """As when the loop closes and cancels every task, the write's and its caller's."""
    gate = asyncio.Event()
    pending = drive(_write(gate, True))
    caller = asyncio.ensure_future(pending.seen())
    await asyncio.sleep(0)
    assert pending.task is not None
    pending.task.cancel()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        (await _ended(caller)).result()
    assert pending.task.cancelled()


async def test_a_write_cut_off_before_it_began_ends_its_waiting_caller_cancelled() -> None:
    """The write's task is cancelled before its first step (none of its code
    runs) while its caller already waits: the caller still hears of it."""
    gate = asyncio.Event()

    async def caller() -> tuple[bool, bool]:
        pending = drive(_write(gate, True))
        assert pending.task is not None
        pending.task.cancel()
        return await pending.seen()

    waiting = asyncio.ensure_future(caller())
    with pytest.raises(asyncio.CancelledError):
        (await _ended(waiting)).result()


async def test_one_error_failing_many_writes_keeps_each_caller_s_traceback_short() -> None:
    """A group's error fails each of its writes: each caller raises it from the
    traceback it came with, not from the one the caller before it added to."""
    try:
        raise LookupError("group failed")
    except LookupError as exc:
        error = exc
    group: list[Pending[bool]] = [Pending() for _ in range(3)]
    for pending in group:
        pending.fail(error)
    depths = []
    for pending in group:
        with pytest.raises(LookupError) as info:
            await pending.seen()
        depths.append(len(info.traceback))
    assert depths[0] == depths[1] == depths[2], depths


async def test_a_writer_whose_committers_are_cancelled_before_they_begin_leaves_none_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop closes as writes have just been submitted: the committers'
    tasks are cancelled before their first step. Their callers end cancelled,
    a write queued behind them ends Unavailable (no new group starts), and the
    writer counts no committer busy."""
    monkeypatch.setattr(pg_writer, "_call_of", lambda w, links: (b"weft_apply_call", [], []))
    writer = pg_writer.PgWriter("postgresql://unused", DbStats())
    submitted = [writer.submit(cast(RunWrite, object())) for _ in range(pg_writer.COMMITTERS + 1)]
    *alone, queued = submitted
    assert queued.task is None and all(p.task is not None for p in alone)
    callers = [asyncio.ensure_future(p.seen()) for p in submitted]
    for p in alone:
        assert p.task is not None
        p.task.cancel()
    for caller in callers[:-1]:
        with pytest.raises(asyncio.CancelledError):
            (await _ended(caller)).result()
    with pytest.raises(Unavailable, match="stopping"):
        (await _ended(callers[-1])).result()
    assert writer._busy == 0 and writer._all_done.is_set()


async def test_a_group_started_as_the_loop_closes_is_cancelled_with_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One committer ends as the loop sweeps its tasks, and its writer starts a
    group for the write queued behind it: a task the sweep did not see. The
    other committers, cancelled, cancel it too, and nobody is left waiting on
    a write that will not be made (here the database never answers)."""
    monkeypatch.setattr(pg_writer, "_call_of", lambda w, links: (b"weft_apply_call", [], []))
    writer = pg_writer.PgWriter("postgresql://unused", DbStats())
    writes = [cast(RunWrite, object()) for _ in range(pg_writer.COMMITTERS + 1)]
    first_done, never = asyncio.Event(), asyncio.Event()

    async def write_alone(queued: Any, *, after_loss: bool = False) -> bool:
        await (first_done if queued.w is writes[0] else never).wait()
        return True

    monkeypatch.setattr(writer, "_write_alone", write_alone)
    submitted = [writer.submit(w) for w in writes]
    callers = [asyncio.ensure_future(p.seen()) for p in submitted]
    await asyncio.sleep(0)
    first_done.set()
    assert (await _ended(callers[0])).result() == (True, False)
    assert writer._groups, "the first committer took the queued write"
    for pending in submitted[1:-1]:  # (the sweep: the other committers)
        assert pending.task is not None
        pending.task.cancel()
    for caller in callers[1:-1]:
        with pytest.raises(asyncio.CancelledError):
            (await _ended(caller)).result()
    with pytest.raises(Unavailable):
        (await _ended(callers[-1])).result()
    await asyncio.sleep(0)
    assert writer._busy == 0 and writer._all_done.is_set() and not writer._groups


async def test_what_comes_after_the_first_outcome_is_dropped() -> None:
    pending: Pending[bool] = Pending()
    pending.end(True)
    pending.fail(RuntimeError("late"))
    pending.abandon()
    assert await pending.seen() == (True, False)

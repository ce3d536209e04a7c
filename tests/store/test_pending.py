"""`Pending`: a write's outcome reaches its caller even when the caller was
cancelled meanwhile (a client that went away), and only a write that was
itself cut off (the loop closing) ends in CancelledError."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.store.pending import Pending, drive


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


async def test_a_write_cut_off_itself_ends_its_caller_cancelled() -> None:
    gate = asyncio.Event()
    pending = drive(_write(gate, True))
    caller = asyncio.ensure_future(pending.seen())
    await asyncio.sleep(0)
    assert pending.task is not None
    pending.task.cancel()  # (as the loop does when it closes)
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert pending.done


async def test_what_comes_after_the_first_outcome_is_dropped() -> None:
    pending: Pending[bool] = Pending()
    pending.end(True)
    pending.fail(RuntimeError("late"))
    pending.abandon()
    assert await pending.seen() == (True, False)

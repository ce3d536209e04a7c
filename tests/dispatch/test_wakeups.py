"""Pollers queue for task wake-ups: n new tasks wake the n longest waiting."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from orchestrator.dispatch import wakeups as wakeups_module
from orchestrator.dispatch.wakeups import SAFETY_NET, Wakeups, wait_ticket
from orchestrator.store.notices import read_tasks_added, tasks_added
from orchestrator.store.rows import TaskListKey

KEY = TaskListKey("default", "decision", "orders")


async def test_n_tasks_wake_the_n_longest_waiting_pollers() -> None:
    wakeups = Wakeups()
    first, second, third = (wakeups.ticket(KEY) for _ in range(3))
    wakeups.wake_pollers(KEY, 2)
    assert [first.done(), second.done(), third.done()] == [True, True, False]
    assert wakeups.waiting_pollers(KEY) == 1


async def test_a_poller_that_left_is_not_woken_in_place_of_one_waiting() -> None:
    wakeups = Wakeups()
    gone, waiting = wakeups.ticket(KEY), wakeups.ticket(KEY)
    wakeups.leave(KEY, gone)
    wakeups.wake_pollers(KEY)
    assert not gone.done()
    assert waiting.done()
    assert wakeups.waiting_pollers(KEY) == 0


async def test_a_poller_leaving_after_its_wake_up_or_hand_off_leaves_the_rest_in_line() -> None:
    wakeups = Wakeups()
    woken, handed, waiting = (wakeups.ticket(KEY, take=lambda t, i: None) for _ in range(3))
    wakeups.wake_pollers(KEY)
    assert wakeups.taker(KEY) is handed
    for ticket in (woken, handed, woken):  # leaving twice changes nothing either
        wakeups.leave(KEY, ticket)
        assert wakeups.waiting_pollers(KEY) == 1
    assert wakeups.taker(KEY) is waiting
    wakeups.leave(KEY, waiting)
    assert wakeups.waiting_pollers(KEY) == 0


async def test_waking_an_empty_list_is_a_no_op_and_other_lists_are_untouched() -> None:
    wakeups = Wakeups()
    other = wakeups.ticket(TaskListKey("default", "activity", "orders"))
    wakeups.wake_pollers(KEY, 5)
    assert not other.done()


async def test_wake_all_wakes_every_poller_and_follower() -> None:
    wakeups = Wakeups()
    tickets = [wakeups.ticket(KEY) for _ in range(3)]
    follower = wakeups.current("run-1")
    wakeups.wake_all()
    assert all(ticket.done() for ticket in tickets)
    assert follower.is_set()
    assert wakeups.waiting_pollers(KEY) == 0


async def test_wait_ticket_reports_a_timeout_and_a_wake_up() -> None:
    wakeups = Wakeups()
    ticket = wakeups.ticket(KEY)
    assert await wait_ticket(ticket, 0.01) is False
    wakeups.wake_pollers(KEY)
    assert await wait_ticket(ticket, 5.0) is True


async def test_a_cancelled_wait_leaves_the_ticket_and_its_callbacks_alone() -> None:
    # The ticket is the poll's place in the queue: cancelling the poll's wait
    # must not cancel it (a hand-off landing then is still seen). (That the wait
    # takes its callback off the ticket: the next test.)
    wakeups = Wakeups()
    ticket = wakeups.ticket(KEY)
    waiting = asyncio.create_task(wait_ticket(ticket, 5.0))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not ticket.done()
    wakeups.wake_pollers(KEY)
    assert ticket.done() and not ticket.cancelled()
    assert await wait_ticket(ticket, 5.0) is True


class _Counted(asyncio.Future[None]):
    """A ticket that counts the callbacks on it."""

    callbacks = 0

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        self.callbacks += 1
        super().add_done_callback(fn, context=context)

    def remove_done_callback(self, fn: Any) -> int:
        removed = super().remove_done_callback(fn)
        self.callbacks -= removed
        return removed


@pytest.mark.parametrize("ending", ["timeout", "cancel"])
async def test_a_finished_wait_takes_its_callback_off_the_ticket(ending: str) -> None:
    ticket = _Counted()
    if ending == "timeout":
        assert await wait_ticket(ticket, 0.01) is False
    else:
        waiting = asyncio.create_task(wait_ticket(ticket, 5.0))
        await asyncio.sleep(0)
        assert ticket.callbacks == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert ticket.callbacks == 0 and not ticket.done()


def test_notify_payload_round_trips_a_task_list_name_with_the_separator() -> None:
    key = TaskListKey("default", "activity", "a|b")
    assert read_tasks_added(tasks_added("node1", key, 3)) == ("node1", 3, key)


def test_the_same_notice_again_in_a_transaction_differs_and_reads_the_same() -> None:
    """PostgreSQL delivers a payload sent twice in one transaction once."""
    key = TaskListKey("default", "activity", "orders")
    copies = [tasks_added("node1", key, 1, nth=n) for n in range(3)]
    assert len(set(copies)) == 3
    assert {read_tasks_added(p) for p in copies} == {("node1", 1, key)}


@pytest.mark.parametrize("payload", ["decision|default|orders", "node|many|decision|default|x"])
def test_a_payload_of_another_format_is_refused(payload: str) -> None:
    with pytest.raises(ValueError):
        read_tasks_added(payload)


# -- what is noted of each list, as lists come and go -----------------------------------


def _lists(n: int, prefix: str = "run") -> list[TaskListKey]:
    return [TaskListKey("default", "activity", f"{prefix}-{i}") for i in range(n)]


async def test_lists_that_come_and_go_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wakeups_module, "SAFETY_NET", 0.0)  # every note is old at once
    wakeups = Wakeups()
    for key in _lists(20_000):  # a list per run: woken once, found empty once
        wakeups.wake_pollers(key)
        wakeups.found_empty(key, wakeups.generation(key), time.monotonic())
    assert wakeups.noted() <= 2 * 1024


async def test_a_sweep_keeps_what_a_look_may_still_use() -> None:
    wakeups = Wakeups()
    now = time.monotonic()
    woken, never_woken, waited_on = _lists(3, "kept")
    wakeups.wake_pollers(woken)
    wakeups.found_empty(woken, wakeups.generation(woken), now)
    wakeups.found_empty(never_woken, wakeups.generation(never_woken), now)
    ticket = wakeups.ticket(waited_on)
    wakeups.wake_pollers(waited_on, 0)  # (a stamp, no poller woken)
    stamp = wakeups.generation(waited_on)
    for key in _lists(5_000):  # enough lists to sweep
        wakeups.wake_pollers(key)
    assert wakeups.noted() < 5_000  # swept
    assert wakeups.known_empty(woken, now, SAFETY_NET)
    assert wakeups.known_empty(never_woken, now, SAFETY_NET)
    assert wakeups.generation(waited_on) == stamp and not ticket.done()


async def test_a_wake_up_during_a_look_is_not_lost_to_a_sweep() -> None:
    wakeups = Wakeups()
    key, *others = _lists(5_001, "raced")
    before = wakeups.generation(key)  # a poller's look starts...
    wakeups.wake_pollers(key)  # ...a commit adds a task to the list...
    for other in others:  # ...and the list is swept, with all the others
        wakeups.wake_pollers(other)
    assert wakeups.noted() < 5_000
    wakeups.found_empty(key, before, time.monotonic())  # the look read nothing
    assert not wakeups.known_empty(key, time.monotonic(), SAFETY_NET)


async def test_a_look_in_flight_notes_nothing_after_everyone_was_woken() -> None:
    # A look starts, a notice is lost with the link, the link comes back
    # (everyone looks again), and then the look reads nothing: not empty.
    wakeups = Wakeups()
    before = wakeups.generation(KEY)
    wakeups.wake_all()
    wakeups.found_empty(KEY, before, time.monotonic())
    assert not wakeups.known_empty(KEY, time.monotonic(), SAFETY_NET)


async def test_followers_leave_nothing_behind() -> None:
    wakeups = Wakeups()
    with wakeups.following("run-1"):
        first = wakeups.current("run-1")
        with wakeups.following("run-1"):
            assert wakeups.current("run-1") is first
        assert wakeups.followed() == 1  # one still follows
        wakeups.wake("run-1")
        assert first.is_set()
        wakeups.current("run-1")  # (the next wake-up's)
    assert wakeups.followed() == 0

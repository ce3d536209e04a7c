"""Long polls cost nothing while idle (a list found empty is not looked at again
until a commit wakes it) and each client may park only so many (dispatch/polls.py)."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.dispatch import polls
from orchestrator.dispatch.polls import LongPolls, client_of
from orchestrator.dispatch.wakeups import Wakeups
from orchestrator.engine.errors import ResourceExhausted
from orchestrator.store.rows import TaskListKey
from tests.helpers import wait_until

KEY = TaskListKey("default", "activity", "work")


class Backlog:
    """A task list in memory: `claim` hands out a task if there is one, and counts looks."""

    def __init__(self) -> None:
        self.tasks: list[str] = []
        self.looks = 0

    async def claim(self) -> str | None:
        self.looks += 1
        await asyncio.sleep(0)  # a look takes a turn of the loop, like a query
        return self.tasks.pop(0) if self.tasks else None


async def test_parked_polls_on_an_empty_list_look_once_between_wake_ups() -> None:
    wakeups, backlog = Wakeups(), Backlog()
    longpolls = LongPolls(wakeups)
    first = asyncio.create_task(longpolls.poll(KEY, "client", 30, backlog.claim))
    await wait_until(lambda: _true(wakeups.waiting_pollers(KEY) == 1))
    # Polls that come after the list was found empty park without a look.
    parked = [first] + [
        asyncio.create_task(longpolls.poll(KEY, "client", 30, backlog.claim)) for _ in range(199)
    ]
    await wait_until(lambda: _true(wakeups.waiting_pollers(KEY) == 200))
    assert backlog.looks == 1
    # A commit adds two tasks and wakes two pollers: they look and take them.
    backlog.tasks += ["t1", "t2"]
    wakeups.wake_pollers(KEY, 2)
    done = await wait_until(lambda: _true([t for t in parked if t.done()]))
    await asyncio.sleep(0.05)
    assert sorted(t.result() for t in parked if t.done()) == ["t1", "t2"]
    assert backlog.looks <= 4  # the two woken, and at most the ones they passed a wake-up to
    assert len(done) == 2
    for task in parked:
        task.cancel()
    await asyncio.gather(*parked, return_exceptions=True)


async def test_a_wake_up_during_a_look_is_not_lost() -> None:
    """A commit that lands while the list is being looked at (after the look read
    nothing) must not leave the list marked empty."""
    wakeups = Wakeups()
    longpolls = LongPolls(wakeups)
    tasks: list[str] = []

    async def racing_claim() -> str | None:
        if tasks:
            return tasks.pop()
        tasks.append("late")  # committed just after our read saw nothing
        wakeups.wake_pollers(KEY)
        return None

    got = await longpolls.poll(KEY, "client", 5, racing_claim)
    assert got == "late"


async def test_knowledge_of_an_empty_list_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(polls, "SAFETY_NET", 0.05)
    wakeups, backlog = Wakeups(), Backlog()
    longpolls = LongPolls(wakeups)
    assert await longpolls.poll(KEY, "client", 0.3, backlog.claim) is None
    assert 2 <= backlog.looks <= 8  # once per safety-net interval, not per loop turn


async def test_wake_all_drops_what_was_known() -> None:
    wakeups, backlog = Wakeups(), Backlog()
    longpolls = LongPolls(wakeups)
    poll = asyncio.create_task(longpolls.poll(KEY, "client", 30, backlog.claim))
    await wait_until(lambda: _true(wakeups.waiting_pollers(KEY) == 1))
    backlog.tasks.append("missed notification")
    wakeups.wake_all()  # e.g. the LISTEN connection came back
    assert await poll == "missed notification"


async def test_each_client_may_park_only_so_many_polls() -> None:
    wakeups, backlog = Wakeups(), Backlog()
    longpolls = LongPolls(wakeups, max_per_client=3)
    parked = [
        asyncio.create_task(longpolls.poll(KEY, "ipv4:10.0.0.5", 30, backlog.claim))
        for _ in range(3)
    ]
    await wait_until(lambda: _true(longpolls.parked("ipv4:10.0.0.5") == 3))
    with pytest.raises(ResourceExhausted, match="concurrent polls per client"):
        await longpolls.poll(KEY, "ipv4:10.0.0.5", 30, backlog.claim)
    # Another client is not held back by this one.
    other = asyncio.create_task(longpolls.poll(KEY, "ipv4:10.0.0.6", 30, backlog.claim))
    await wait_until(lambda: _true(longpolls.parked("ipv4:10.0.0.6") == 1))
    # A poll that ends gives its place back.
    backlog.tasks.append("t")
    wakeups.wake_pollers(KEY)
    await wait_until(lambda: _true(longpolls.parked("ipv4:10.0.0.5") == 2))
    again = asyncio.create_task(longpolls.poll(KEY, "ipv4:10.0.0.5", 30, backlog.claim))
    await wait_until(lambda: _true(longpolls.parked("ipv4:10.0.0.5") == 3))
    for task in [*parked, other, again]:
        task.cancel()
    await asyncio.gather(*parked, other, again, return_exceptions=True)
    assert longpolls.parked("ipv4:10.0.0.5") == 0


def test_a_client_is_its_host_whatever_the_port() -> None:
    assert client_of("ipv4:127.0.0.1:40001") == client_of("ipv4:127.0.0.1:40002")
    assert client_of("ipv6:[::1]:40001") == "ipv6:[::1]"
    assert client_of("unix:/tmp/sock") == "unix:/tmp/sock"


async def _true(value: object) -> object:
    return value

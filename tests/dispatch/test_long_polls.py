"""Long polls cost nothing while idle (a list found empty is not looked at again
until a commit wakes it) and each client may park only so many (dispatch/polls.py)."""

from __future__ import annotations

import asyncio
from typing import Any

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


async def test_polls_that_come_while_a_woken_poller_looks_park_without_a_look() -> None:
    """A wake-up a parked poller took is that poller's to look for: polls that
    come meanwhile (as answers with their next poll do) park, instead of each
    looking for the same task (between nodes, a claim each)."""
    wakeups, backlog = Wakeups(), Backlog()
    longpolls = LongPolls(wakeups)
    first = asyncio.create_task(longpolls.poll(KEY, "client", 30, backlog.claim))
    await wait_until(lambda: _true(wakeups.waiting_pollers(KEY) == 1))
    assert backlog.looks == 1
    backlog.tasks.append("t")
    wakeups.wake_pollers(KEY)  # (another node's task: a notification)
    later = [
        asyncio.create_task(longpolls.poll(KEY, "client", 30, backlog.claim)) for _ in range(5)
    ]
    assert await first == "t"
    await wait_until(lambda: _true(wakeups.waiting_pollers(KEY) == 5))
    assert backlog.looks == 2  # the woken poller's, and no other
    # A wake-up no poller waits for: the next poll to come looks.
    for task in later:
        task.cancel()
    await asyncio.gather(*later, return_exceptions=True)
    backlog.tasks.append("u")
    wakeups.wake_pollers(KEY)
    assert await longpolls.poll(KEY, "client", 30, backlog.claim) == "u"


async def test_a_woken_poller_looks_though_a_look_begun_before_found_the_list_empty() -> None:
    wakeups = Wakeups()
    longpolls = LongPolls(wakeups)
    tasks: list[str] = []
    looks: list[str] = []
    reading = asyncio.Event()
    read = asyncio.Event()

    def claim(name: str, slow: bool = False) -> Any:
        async def look() -> str | None:
            looks.append(name)
            if slow and len(looks) > 1:
                reading.set()
                await read.wait()  # its read saw nothing; the commit comes meanwhile
                return None
            return tasks.pop() if tasks else None

        return look

    parked = asyncio.create_task(longpolls.poll(KEY, "client", 30, claim("parked")))
    await wait_until(lambda: _true(wakeups.waiting_pollers(KEY) == 1))
    wakeups.wake_pollers(KEY, 0)  # (a stamp, so that the slow look begins unsure)
    slow = asyncio.create_task(longpolls.poll(KEY, "client", 30, claim("slow", slow=True)))
    await reading.wait()
    tasks.append("t")
    wakeups.wake_pollers(KEY)  # wakes the parked poll, the longest waiting
    read.set()  # the slow look ends and notes the list empty
    assert await asyncio.wait_for(parked, 5) == "t"
    slow.cancel()
    await asyncio.gather(slow, return_exceptions=True)


async def test_a_woken_poller_whose_look_fails_passes_its_wake_up_on() -> None:
    wakeups, backlog = Wakeups(), Backlog()
    longpolls = LongPolls(wakeups)
    failing = True

    async def claim_then_fail() -> str | None:
        if failing and backlog.looks:
            raise OSError("connection lost")
        return await backlog.claim()

    doomed = asyncio.create_task(longpolls.poll(KEY, "client", 30, claim_then_fail))
    await wait_until(lambda: _true(wakeups.waiting_pollers(KEY) == 1))
    other = asyncio.create_task(longpolls.poll(KEY, "client", 30, backlog.claim))
    await wait_until(lambda: _true(wakeups.waiting_pollers(KEY) == 2))
    backlog.tasks.append("t")
    wakeups.wake_pollers(KEY)  # the first in line, whose look then fails
    with pytest.raises(OSError):
        await doomed
    failing = False
    assert await asyncio.wait_for(other, 5) == "t"


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

"""Waking long polls the moment there is something for them.

Each key (a task list, or a run for history followers) has a generation: a
waiter takes the current event *before* it looks in the database, so a wake-up
that lands between its look and its wait is never lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable


class Wakeups:
    def __init__(self) -> None:
        self._events: dict[Hashable, asyncio.Event] = {}

    def current(self, key: Hashable) -> asyncio.Event:
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = asyncio.Event()
        return event

    def wake(self, key: Hashable) -> None:
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()


async def wait(event: asyncio.Event, timeout: float) -> bool:
    """True if woken, False on timeout."""
    if timeout <= 0:
        return event.is_set()
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        return False
    return True

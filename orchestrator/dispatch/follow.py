"""History follows: a reader that asked for the events after the last it has
(`GetWorkflowHistory` with wait-for-new-event, a client waiting for a run's
result) waits here until a commit adds one, the run closes, or its long poll
expires.

A run's followers wait on one key (`follow_key`), woken by every commit of
the run on this node and, from other nodes, by the run's close notice; a
missed cross-node wake-up costs at most `RECHECK` seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from orchestrator.store.store import Store
from sdk.api.weft.v1 import history_pb2 as h

from .wakeups import Wakeups, wait

RECHECK = 2.0  # a missed cross-node wake-up costs at most this much latency


def follow_key(run_id: str) -> tuple[str, str]:
    """The wake-up key of a run's followers."""
    return ("run", run_id)


async def tail(
    store: Store,
    wakeups: Wakeups,
    run_id: str,
    first_id: int,
    size: int,
    max_bytes: int,
    wait_new: bool,
    timeout: float,
    draining: Callable[[], bool],
) -> tuple[list[h.HistoryEvent], bool]:
    """The run's events from `first_id` (a page of at most `size` events and
    `max_bytes`), waiting up to `timeout` seconds for the next one if there is
    none yet and `wait_new`; and whether there is more to read."""
    deadline = asyncio.get_running_loop().time() + timeout
    key = follow_key(run_id)
    with wakeups.following(key):
        while True:
            woken = wakeups.current(key)
            # Status first: if the run was closed before we read, the read sees its last event.
            state = await store.load_state(run_id)
            events = await store.read_history(run_id, first_id, None, size, max_bytes)
            remaining = deadline - asyncio.get_running_loop().time()
            if events or not wait_new or not state.is_open or draining() or remaining <= 0:
                break
            await wait(woken, min(remaining, RECHECK))
    nxt = events[-1].event_id + 1 if events else first_id
    # A follower (wait_new) is handed a token while the run is open, to wait on;
    # a plain read ends at the history as it stands. A closed run's length is
    # final, so "more" is exact once it is closed.
    return events, (wait_new and state.is_open) or nxt < state.next_event_id

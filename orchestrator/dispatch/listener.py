"""Cross-node wake-ups on PostgreSQL: LISTEN on the channel the store NOTIFYs
when it commits a task. A notification is a hint and the rows are the truth:
after every (re)connect all local waiters are woken to look again, because
notifications sent while we were disconnected are gone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
import structlog

from orchestrator.store.dialect import libpq_url
from orchestrator.store.notices import (
    CHANGES_CHANNEL,
    NOTIFY_CHANNEL,
    read_change,
    read_tasks_added,
)
from orchestrator.store.rows import TaskListKey

log = structlog.get_logger("weft.dispatch")


async def listen(
    url: str,
    on_task: Callable[[TaskListKey, int], None],
    on_reconnect: Callable[[], None],
    ready: asyncio.Event | None = None,
    own_node: str = "",
    on_change: Callable[[str, str], None] = lambda kind, subject: None,
) -> None:
    """Call `on_task(task list, tasks added)` for each commit of another node that
    adds tasks, and `on_change(kind, subject)` for its other news (CHANGES_CHANNEL)."""
    delay = 0.1
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(
                libpq_url(url), autocommit=True
            ) as conn:
                await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                await conn.execute(f"LISTEN {CHANGES_CHANNEL}")
                delay = 0.1
                on_reconnect()
                if ready is not None:
                    ready.set()
                while True:
                    async for note in conn.notifies(timeout=5.0):
                        if note.channel == CHANGES_CHANNEL:
                            node, kind, subject = read_change(note.payload)
                            if node != own_node and kind:
                                on_change(kind, subject)
                            continue
                        try:
                            node, added, key = read_tasks_added(note.payload)
                        except ValueError:
                            continue  # not a payload this version writes
                        if node != own_node:
                            on_task(key, added)
                    await conn.execute("SELECT 1")  # liveness: a dead link raises here
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("listener.reconnect", error=str(exc)[:200], in_seconds=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

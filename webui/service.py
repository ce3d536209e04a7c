"""The UI's side of the service: one SDK client per (person's key, namespace),
and a bounded cache of closed runs' histories.

Events never change once written, so what the UI read of a run is kept (a
timeline redrawn at another zoom or as an open run goes on, a history page
turned) and only newer events are fetched. The cache is shared by everyone
using the UI: a page serves from it only after a call made with the visitor's
own key (`describe`) has let them see the run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sdk.client import AsyncClient
from sdk.events import CLOSE_TYPES, Event
from sdk.retry import RetryPolicy
from sdk.visibility import MAX_PAGE
from sdk.workflows import WorkflowInfo
from webui.config import UiConfig

log = logging.getLogger("weft.ui")
UI_RETRY = RetryPolicy(give_up_after=timedelta(seconds=3))
MAX_CLIENTS = 64
CLIENTS_PER_KEY = 8
"""Namespaces one key (or the anonymous visitors together) keeps clients for: a
visitor asking for random namespaces evicts only clients of their own key."""


@dataclass(eq=False)
class Lease:
    """A client in use by a request; an evicted client is closed once no request
    uses it any more (at once when none does), never under a call."""

    client: AsyncClient
    users: int = 0
    retired: bool = False


class Clients:
    """AsyncClients by (API key, namespace): at most `CLIENTS_PER_KEY` namespaces a
    key and `MAX_CLIENTS` in all, least recently used evicted first."""

    def __init__(self, config: UiConfig) -> None:
        self.config = config
        self._clients: OrderedDict[tuple[str, str], Lease] = OrderedDict()
        self._retired: set[Lease] = set()
        """Retired clients some request still uses."""
        self._closing: set[asyncio.Task[None]] = set()

    def lease(self, api_key: str | None, namespace: str) -> Lease:
        """The client of (key, namespace), counted as in use until `release`."""
        key = (api_key or "", namespace)
        lease = self._clients.get(key)
        if lease is None:
            lease = Lease(
                AsyncClient(
                    self.config.address,
                    namespace=namespace,
                    identity=f"weft-ui@{socket.gethostname()}",
                    retry=UI_RETRY,
                    tls=self.config.tls,
                    api_key=api_key,
                )
            )
            self._clients[key] = lease
            same = [k for k in self._clients if k[0] == key[0]]
            for old in same[: max(0, len(same) - CLIENTS_PER_KEY)]:
                self._retire(old)
            while len(self._clients) > MAX_CLIENTS:
                self._retire(next(iter(self._clients)))
        self._clients.move_to_end(key)
        lease.users += 1
        return lease

    def release(self, lease: Lease) -> None:
        """The request is done with `lease`. Synchronous, so that a cancelled request
        still releases every lease it holds; a retired client no request uses any
        more is closed in a task of its own."""
        lease.users -= 1
        if lease.retired and lease.users <= 0:
            self._close_soon(lease)

    def _retire(self, key: tuple[str, str]) -> None:
        lease = self._clients.pop(key)
        lease.retired = True
        if lease.users <= 0:
            self._close_soon(lease)  # idle: nothing will release it later
        else:
            self._retired.add(lease)

    def _close_soon(self, lease: Lease) -> None:
        self._retired.discard(lease)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (never in a request): `close` closes it
            self._retired.add(lease)
            return
        task = loop.create_task(_close(lease.client))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def settle(self) -> None:
        """Wait for the closes under way."""
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def forget(self, api_key: str) -> None:
        """Retire the clients of a key (its person logged out); each is closed when
        its last call ends."""
        for key in [k for k in self._clients if k[0] == api_key]:
            self._retire(key)

    def __len__(self) -> int:
        return len(self._clients)

    async def close(self) -> None:
        await self.settle()
        for lease in [*self._clients.values(), *self._retired]:
            await lease.client.close()
        self._clients.clear()
        self._retired.clear()


async def _close(client: AsyncClient) -> None:
    try:
        await client.close()
    except Exception:  # a client that fails to close is gone all the same
        log.exception("weft ui: closing a client failed")


def events_bytes(events: Sequence[Event]) -> int:
    """About what `events` take in memory: their attributes as JSON, and a fixed
    cost an event."""
    return sum(200 + len(json.dumps(e.attributes, default=str, ensure_ascii=False)) for e in events)


class HistoryCache:
    """Histories read so far (whole for a closed run, its start for an open one),
    bounded in runs and in bytes; a history above `max_run_bytes` is not kept."""

    def __init__(self, *, max_runs: int, max_bytes: int, max_run_bytes: int) -> None:
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self.max_run_bytes = max_run_bytes
        self._runs: OrderedDict[tuple[str, str, str], tuple[list[Event], int]] = OrderedDict()
        self._bytes = 0

    @property
    def size(self) -> int:
        return self._bytes

    def holds(self, key: tuple[str, str, str]) -> bool:
        return key in self._runs

    def get(self, key: tuple[str, str, str]) -> list[Event] | None:
        entry = self._runs.get(key)
        if entry is None:
            return None
        self._runs.move_to_end(key)
        return entry[0]

    def put(self, key: tuple[str, str, str], events: list[Event], added: Sequence[Event]) -> bool:
        """Keep `events` (the whole history, or the start of an open run's), of which
        `added` are new since the last `put` of `key`. False: too big to keep."""
        old = self._runs.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        size = old[1] if old is not None else events_bytes(events[: len(events) - len(added)])
        size += events_bytes(added)
        if size > self.max_run_bytes:
            return False
        self._runs[key] = (events, size)
        self._bytes += size
        while len(self._runs) > self.max_runs or self._bytes > self.max_bytes:
            _, (_, gone) = self._runs.popitem(last=False)
            self._bytes -= gone
        return key in self._runs


async def whole_history(
    client: AsyncClient, cache: HistoryCache, info: WorkflowInfo
) -> list[Event]:
    """The run's whole history. Events never change once written, so what was read
    before is kept and only the events after it are fetched (an open run's timeline,
    redrawn every few seconds, reads its new events only). The caller has described
    the run with the visitor's own client: the cache is shared. A history too big to
    keep is read whole each time (`HistoryCache.holds` says which)."""
    key = run_key(client, info)
    known = cache.get(key) or []
    if known and (known[-1].type in CLOSE_TYPES or len(known) >= info.history_length):
        return known
    events = list(known)
    while True:
        page = await client.history_page(
            info.workflow_id,
            run_id=info.run_id,
            first_event_id=len(events) + 1,
            page_size=MAX_PAGE,
        )
        events.extend(page.events)
        if not page.next_event_id or not page.events:
            break
    cache.put(key, events, events[len(known) :])
    return events


def run_key(client: AsyncClient, info: WorkflowInfo) -> tuple[str, str, str]:
    return (client.namespace, info.workflow_id, info.run_id)


@dataclass(frozen=True)
class HistorySlice:
    events: list[Event]
    next_event_id: int
    """The first event after this slice; 0: none yet."""


async def history_slice(
    client: AsyncClient, cache: HistoryCache, info: WorkflowInfo, first: int, size: int
) -> HistorySlice:
    """`size` events from `first` on: from what the cache holds of the run when it
    has them all, else one page from the server (never the whole history)."""
    cached = cache.get(run_key(client, info))
    if cached is None or len(cached) < min(first - 1 + size, info.history_length):
        page = await client.history_page(
            info.workflow_id, run_id=info.run_id, first_event_id=first, page_size=size
        )
        return HistorySlice(page.events, page.next_event_id)
    chosen = cached[first - 1 : first - 1 + size]
    after = first + len(chosen)
    return HistorySlice(chosen, after if after <= len(cached) else 0)


# -- the runs list -------------------------------------------------------------------


@dataclass(frozen=True)
class RunFilter:
    status: str = ""
    workflow_type: str = ""
    workflow_id_prefix: str = ""
    task_list: str = ""
    started_after: datetime | None = None
    started_before: datetime | None = None

    def query(self) -> dict[str, Any]:
        return {
            "workflow_type": self.workflow_type,
            "workflow_id_prefix": self.workflow_id_prefix,
            "task_list": self.task_list,
            "started_after": self.started_after,
            "started_before": self.started_before,
        }


@dataclass(frozen=True)
class RunPage:
    runs: Sequence[WorkflowInfo]
    next_token: bytes
    counts: dict[str, int]
    """Runs per status under the filter (statuses with none are absent)."""


async def runs_page(
    client: AsyncClient, flt: RunFilter, *, page_size: int, token: bytes
) -> RunPage:
    counts = await client.count_workflows(**flt.query())
    page = await client.list_page(
        status=flt.status or None, page_size=page_size, page_token=token, **flt.query()
    )
    return RunPage(page.runs, page.next_page_token, counts)

"""The UI's side of the service: one SDK client per (person's key, namespace),
and a bounded cache of closed runs' histories.

Events never change once written, so what the UI read of a run is kept (a
timeline redrawn at another zoom or as an open run goes on, a history page
turned) and only newer events are fetched. The cache is shared by everyone
using the UI: a page serves from it only after a call made with the visitor's
own key (`describe`) has let them see the run.
"""

from __future__ import annotations

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

UI_RETRY = RetryPolicy(give_up_after=timedelta(seconds=3))
MAX_CLIENTS = 64


class Clients:
    """AsyncClients by (API key, namespace), least recently used closed first."""

    def __init__(self, config: UiConfig) -> None:
        self.config = config
        self._clients: OrderedDict[tuple[str, str], AsyncClient] = OrderedDict()
        self._retired: list[AsyncClient] = []

    async def get(self, api_key: str | None, namespace: str) -> AsyncClient:
        key = (api_key or "", namespace)
        client = self._clients.get(key)
        if client is None:
            client = AsyncClient(
                self.config.address,
                namespace=namespace,
                identity=f"weft-ui@{socket.gethostname()}",
                retry=UI_RETRY,
                tls=self.config.tls,
                api_key=api_key,
            )
            self._clients[key] = client
            while len(self._clients) > MAX_CLIENTS:
                _, old = self._clients.popitem(last=False)
                await old.close()
        self._clients.move_to_end(key)
        return client

    async def forget(self, api_key: str) -> None:
        """Close the clients of a key (its person logged out)."""
        for key in [k for k in self._clients if k[0] == api_key]:
            await self._clients.pop(key).close()

    async def close(self) -> None:
        while self._clients:
            _, client = self._clients.popitem()
            await client.close()


class HistoryCache:
    """Histories read so far (whole for a closed run, its start for an open one),
    bounded in runs and in events."""

    def __init__(self, *, max_runs: int, max_events: int) -> None:
        self.max_runs = max_runs
        self.max_events = max_events
        self._runs: OrderedDict[tuple[str, str, str], list[Event]] = OrderedDict()
        self._events = 0

    def get(self, key: tuple[str, str, str]) -> list[Event] | None:
        events = self._runs.get(key)
        if events is not None:
            self._runs.move_to_end(key)
        return events

    def put(self, key: tuple[str, str, str], events: list[Event]) -> None:
        """Keep `events` (the whole history, or the start of an open run's)."""
        if len(events) > self.max_events:
            return
        self._events -= len(self._runs.pop(key, []))
        self._runs[key] = events
        self._events += len(events)
        while len(self._runs) > self.max_runs or self._events > self.max_events:
            _, old = self._runs.popitem(last=False)
            self._events -= len(old)


async def whole_history(
    client: AsyncClient, cache: HistoryCache, info: WorkflowInfo
) -> list[Event]:
    """The run's whole history. Events never change once written, so what was read
    before is kept and only the events after it are fetched (an open run's timeline,
    redrawn every few seconds, reads its new events only). The caller has described
    the run with the visitor's own client: the cache is shared."""
    key = (client.namespace, info.workflow_id, info.run_id)
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
    cache.put(key, events)
    return events


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
    key = (client.namespace, info.workflow_id, info.run_id)
    cached = cache.get(key)
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

"""What the run page reads from a history without reading all of it: the first
event, the last, children, and each pending activity's attempts and last failure.

A history up to `WHOLE` events is read whole (and cached); a longer one as its
first page and its last `TAIL` events, and the page says that children and
attempts were counted there only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sdk.client import AsyncClient
from sdk.events import Event
from sdk.visibility import MAX_PAGE
from sdk.workflows import WorkflowInfo
from webui.service import HistoryCache, whole_history

WHOLE = 3 * MAX_PAGE
TAIL = 2 * MAX_PAGE
_FAILURES = ("ActivityFailed", "ActivityTimedOut", "ActivityScheduledTimeout")


@dataclass
class RunEvents:
    head: list[Event]
    """From the first event on."""
    tail: list[Event]
    """To the last event read (the same list as `head` when the history was read whole)."""
    whole: bool
    tail_first: int = 1
    """The first event id of `tail`."""

    @property
    def started(self) -> Event | None:
        return self.head[0] if self.head else None

    @property
    def last(self) -> Event | None:
        return self.tail[-1] if self.tail else None

    def scanned(self) -> list[Event]:
        """Every event read, each once, in order."""
        if self.whole:
            return self.head
        return [*self.head, *(e for e in self.tail if e.event_id > len(self.head))]


async def run_events(client: AsyncClient, cache: HistoryCache, info: WorkflowInfo) -> RunEvents:
    if info.history_length <= WHOLE:
        events = await whole_history(client, cache, info)
        return RunEvents(events, events, whole=True)
    head = await client.history_page(
        info.workflow_id, run_id=info.run_id, first_event_id=1, page_size=MAX_PAGE
    )
    first = max(len(head.events) + 1, info.history_length - TAIL + 1)
    tail: list[Event] = []
    nxt = first
    while nxt and len(tail) < TAIL:
        page = await client.history_page(
            info.workflow_id, run_id=info.run_id, first_event_id=nxt, page_size=MAX_PAGE
        )
        tail.extend(page.events)
        nxt = page.next_event_id if page.events else 0
    return RunEvents(head.events, tail, whole=False, tail_first=first)


def children(events: list[Event]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for event in events:
        if event.type.startswith("ChildWorkflow") and event.get("workflow_id"):
            child = out.setdefault(event.get("workflow_id"), {"run_id": "", "state": ""})
            child["run_id"] = event.get("run_id") or child["run_id"]
            child["state"] = event.type.removeprefix("ChildWorkflow").lower() or child["state"]
    return out


@dataclass
class Attempts:
    count: int = 0
    last_failure: str = ""


def activity_attempts(events: list[Event]) -> dict[str, Attempts]:
    """By activity id: how many times it was scheduled, and its latest failure or
    timeout, in `events`."""
    scheduled: dict[int, str] = {}
    out: dict[str, Attempts] = {}
    for event in events:
        if event.type == "ActivityScheduled":
            activity_id = str(event.get("activity_id") or "")
            scheduled[event.event_id] = activity_id
            out.setdefault(activity_id, Attempts()).count += 1
        elif event.type in _FAILURES:
            activity_id = scheduled.get(int(event.get("scheduled_event_id") or 0), "")
            if activity_id:
                why = event.get("reason") or event.get("timeout_type") or ""
                out[activity_id].last_failure = f"{event.type} {why}".strip()
    return out

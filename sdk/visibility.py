"""The AsyncClient's calls for looking over a namespace page by page, as an
operator's screen does (the web UI): runs under filters with their counts per
status, task lists with their backlog and pollers, a history from any event."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.converter import PayloadConverter
from sdk.events import Event, event_from_proto
from sdk.workflows import WorkflowInfo, status_name

# The statuses `list_page` filters by: a group ("open", "closed") or one status.
_GROUPS = {"open": s.STATUS_FILTER_OPEN, "closed": s.STATUS_FILTER_CLOSED}
_STATUSES = {
    "completed": c.WORKFLOW_STATUS_COMPLETED,
    "failed": c.WORKFLOW_STATUS_FAILED,
    "canceled": c.WORKFLOW_STATUS_CANCELED,
    "terminated": c.WORKFLOW_STATUS_TERMINATED,
    "continued_as_new": c.WORKFLOW_STATUS_CONTINUED_AS_NEW,
    "timed_out": c.WORKFLOW_STATUS_TIMED_OUT,
}
STATUS_NAMES = ("open", *_STATUSES)
"""Every status a run can have, open first."""
_KIND_NAMES = {c.TASK_LIST_KIND_DECISION: "decision", c.TASK_LIST_KIND_ACTIVITY: "activity"}
MAX_PAGE = 1000


@dataclass(frozen=True)
class WorkflowPage:
    """One page of runs, newest start first; pass `next_page_token` for the next
    (b"" after the last page)."""

    runs: list[WorkflowInfo]
    next_page_token: bytes


@dataclass(frozen=True)
class PollerInfo:
    identity: str
    last_access_time: datetime | None


@dataclass(frozen=True)
class TaskListInfo:
    """A task list with tasks waiting or a poller seen in the last five minutes."""

    name: str
    kind: str
    """"decision" or "activity"."""
    backlog: int
    oldest_task_time: datetime | None
    pollers: list[PollerInfo] = field(default_factory=list)


@dataclass(frozen=True)
class TaskListPage:
    """The task lists of a namespace, by name; `truncated` when there were more
    than the server sends (1000)."""

    task_lists: list[TaskListInfo]
    truncated: bool


@dataclass(frozen=True)
class HistoryPage:
    """Events of one run from some event on; `next_event_id` is where the next
    page starts (0: none is there yet)."""

    run_id: str
    events: list[Event]
    next_event_id: int


def _time(stamp: Timestamp) -> datetime | None:
    return stamp.ToDatetime(tzinfo=UTC) if stamp.seconds or stamp.nanos else None


def _stamp(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    stamp = Timestamp()
    try:
        stamp.FromDatetime(value if value.tzinfo else value.replace(tzinfo=UTC))
    except (OverflowError, ValueError):
        raise ValueError(f"{value.isoformat()} is not a time between 1970 and 9999") from None
    return stamp


class VisibilityCalls:
    """Mixed into `AsyncClient`, which provides `namespace`, `converter` and `rpc`."""

    namespace: str
    converter: PayloadConverter

    async def rpc(self, method: str, request: Message, *, timeout: timedelta | None = None) -> Any:
        raise NotImplementedError

    async def list_page(
        self,
        *,
        status: str | None = None,
        workflow_type: str = "",
        workflow_id_prefix: str = "",
        task_list: str = "",
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        page_size: int = 50,
        page_token: bytes = b"",
    ) -> WorkflowPage:
        """One page of runs, newest start first. `status`: None for all, "open",
        "closed", or one close status ("completed", "failed", "canceled",
        "terminated", "continued_as_new", "timed_out"). `started_after` is
        inclusive, `started_before` exclusive."""
        if status is not None and status not in _GROUPS and status not in _STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUS_NAMES)}, 'closed' or None")
        if not 0 < page_size <= MAX_PAGE:
            raise ValueError(f"page_size must be between 1 and {MAX_PAGE}")
        resp = await self.rpc(
            "ListWorkflows",
            s.ListWorkflowsRequest(
                namespace=self.namespace,
                status_filter=_GROUPS.get(status or "", s.STATUS_FILTER_UNSPECIFIED),
                status=_STATUSES.get(status or "", c.WORKFLOW_STATUS_UNSPECIFIED),
                workflow_type=workflow_type,
                workflow_id_prefix=workflow_id_prefix,
                task_list=task_list,
                start_time_from=_stamp(started_after),
                start_time_to=_stamp(started_before),
                page_size=page_size,
                next_page_token=page_token,
            ),
        )
        return WorkflowPage(
            [WorkflowInfo.from_proto(info) for info in resp.executions], resp.next_page_token
        )

    async def count_workflows(
        self,
        *,
        workflow_type: str = "",
        workflow_id_prefix: str = "",
        task_list: str = "",
        started_after: datetime | None = None,
        started_before: datetime | None = None,
    ) -> dict[str, int]:
        """How many runs have each status under these filters (as `list_page`);
        a status no run has is absent."""
        resp = await self.rpc(
            "CountWorkflows",
            s.CountWorkflowsRequest(
                namespace=self.namespace,
                workflow_type=workflow_type,
                workflow_id_prefix=workflow_id_prefix,
                task_list=task_list,
                start_time_from=_stamp(started_after),
                start_time_to=_stamp(started_before),
            ),
        )
        return {status_name(n.status): n.count for n in resp.counts}

    async def list_task_lists(self) -> TaskListPage:
        """The namespace's task lists with tasks waiting or a poller seen in the
        last five minutes, by name (at most 1000)."""
        resp = await self.rpc("ListTaskLists", s.ListTaskListsRequest(namespace=self.namespace))
        lists = [
            TaskListInfo(
                name=t.name,
                kind=_KIND_NAMES.get(t.kind, "?"),
                backlog=t.backlog,
                oldest_task_time=_time(t.oldest_task_time),
                pollers=[PollerInfo(p.identity, _time(p.last_access_time)) for p in t.pollers],
            )
            for t in resp.task_lists
        ]
        return TaskListPage(lists, resp.truncated)

    async def history_page(
        self,
        workflow_id: str,
        *,
        run_id: str = "",
        first_event_id: int = 1,
        page_size: int = 100,
    ) -> HistoryPage:
        """Up to `page_size` events of the run (the current one unless `run_id`)
        from `first_event_id` on, without reading those before it."""
        if first_event_id < 1:
            raise ValueError("first_event_id must be 1 or more")
        if not 0 < page_size <= MAX_PAGE:
            raise ValueError(f"page_size must be between 1 and {MAX_PAGE}")
        resp = await self.rpc(
            "GetWorkflowHistory",
            s.GetWorkflowHistoryRequest(
                namespace=self.namespace,
                execution=c.WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                page_size=page_size,
                first_event_id=first_event_id,
            ),
        )
        events = [event_from_proto(e, self.converter) for e in resp.events]
        nxt = events[-1].event_id + 1 if events and resp.next_page_token else 0
        return HistoryPage(resp.run_id, events, nxt)

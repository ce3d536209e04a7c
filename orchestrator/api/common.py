"""What the servicer's parts share: settings, conversions, and the base that
holds the store, the token codec and the wake-ups."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from orchestrator.auth.gate import PrincipalLimits
from orchestrator.config import FOLDED_POLL
from orchestrator.dispatch import follow
from orchestrator.dispatch.pollers import PollerSightings
from orchestrator.dispatch.polls import DEFAULT_MAX_POLLS_PER_CLIENT, LongPolls
from orchestrator.dispatch.sessions import SessionBook
from orchestrator.dispatch.wakeups import Wakeups
from orchestrator.engine.defaults import RegisteredWorkflowType, chosen_type, type_candidates
from orchestrator.engine.limits import MAX_DEFINITION_BYTES, SETTABLE, Defaults, Limits
from orchestrator.metrics import Metrics
from orchestrator.store.cache import MAX_TAIL_BYTES
from orchestrator.store.store import RunRow, Store
from sdk import stamps
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s

from . import paging
from .guard import Guard
from .tokens import TokenCodec

Ctx = grpc.aio.ServicerContext[Any, Any]
HISTORY_PAGE = 1000
# A page of history is also bounded in bytes: well under gRPC's default 4 MiB a
# client can receive, whatever the events hold. A page holds no more, or its
# first event alone when that is larger: that one stays under 4 MiB too, since
# a payload may be set no higher than 2 MiB and a definition is at most 256 KiB.
HISTORY_PAGE_BYTES = 2 * 1024 * 1024
DEFAULT_CLIENT_RECEIVE = 4 * 1024 * 1024
if MAX_TAIL_BYTES > HISTORY_PAGE_BYTES:  # (`_history_page` serves a held window as a page)
    raise RuntimeError("a run's tail held in memory must fit in a history page")
if SETTABLE["payload_bytes"][1] + MAX_DEFINITION_BYTES >= DEFAULT_CLIENT_RECEIVE:
    raise RuntimeError("an event with the largest payload must fit what a client receives")
STATUS_VALUES = {
    "open": c.WORKFLOW_STATUS_OPEN,
    "completed": c.WORKFLOW_STATUS_COMPLETED,
    "failed": c.WORKFLOW_STATUS_FAILED,
    "canceled": c.WORKFLOW_STATUS_CANCELED,
    "terminated": c.WORKFLOW_STATUS_TERMINATED,
    "continued_as_new": c.WORKFLOW_STATUS_CONTINUED_AS_NEW,
    "timed_out": c.WORKFLOW_STATUS_TIMED_OUT,
}


@dataclass(frozen=True)
class ServiceSettings:
    long_poll: float = 60.0
    folded_poll: float = FOLDED_POLL
    """How long a poll folded into a worker's answer (`next_poll`) waits for a
    task, the long poll if shorter. The worker learns that its answer was
    written only when that call returns: it logs the task done then, and a
    worker that stops while the call is out sends the answer again (NOT_FOUND
    if it was written). After this the call comes back empty and the worker
    polls on its own: one more call, where a task list has more polls waiting
    than tasks coming in a second (polls are served oldest first)."""
    max_polls_per_client: int = DEFAULT_MAX_POLLS_PER_CLIENT
    limits: Limits = field(default_factory=Limits)
    defaults: Defaults = field(default_factory=Defaults)
    session_timeout: float = 10.0
    """A worker session's timeout when its RegisterWorker names none."""
    lease_period: float = 10.0
    """Of the upkeep lease: a node silent for three is shown lost."""


# What DescribeTaskList and ListTaskLists report as a task list's pollers.
POLLERS_SEEN_WITHIN = timedelta(minutes=5)


def timestamp(at: datetime | float | None) -> Timestamp:
    stamp = Timestamp()
    if at is None or at == 0:
        return stamp
    stamps.set_datetime(stamp, at if isinstance(at, datetime) else datetime.fromtimestamp(at, UTC))
    return stamp


def optional_payload(msg: Any, field_name: str) -> c.Payload | None:
    value: c.Payload | None = getattr(msg, field_name) if msg.HasField(field_name) else None
    return value


def execution_info(row: RunRow, version: str = "") -> c.WorkflowExecutionInfo:
    info = c.WorkflowExecutionInfo(
        execution=c.WorkflowExecution(workflow_id=row.key.workflow_id, run_id=row.key.run_id),
        workflow_type=c.WorkflowType(name=row.workflow_type, version=version),
        task_list=row.task_list,
        status=STATUS_VALUES[row.status],
        start_time=timestamp(row.start_time),
        history_length=row.history_length,
        continued_from_run_id=row.continued_from_run_id,
        parent_run_id=row.parent_run_id,
        replay_of_run_id=row.replay_of_run_id,
        replayed_by_run_id=row.replayed_by_run_id,
    )
    if row.close_time is not None:
        info.close_time.CopyFrom(timestamp(row.close_time))
    return info


class ServiceBase:
    def __init__(
        self,
        store: Store,
        tokens: TokenCodec,
        wakeups: Wakeups,
        settings: ServiceSettings,
        metrics: Metrics,
        pollers: PollerSightings,
        guard: Guard | None = None,
        sessions: SessionBook | None = None,
    ) -> None:
        self.metrics = metrics
        # Authentication off unless the server hands a guard that requires it.
        self.guard = guard or Guard(tokens, None, PrincipalLimits(0, 0))
        self._store = store
        self._tokens = tokens
        self._wakeups = wakeups
        self._settings = settings
        self.polls = LongPolls(wakeups, settings.max_polls_per_client, pollers)
        self._pollers = pollers
        self.sessions = sessions or SessionBook()

    @property
    def draining(self) -> bool:
        """The node is shutting down: polls answer empty, followers stop waiting."""
        return self.polls.draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self.polls.draining = value

    async def _registered_type(self, ns: str, name: str, version: str) -> RegisteredWorkflowType:
        """The registration a start (or a child) naming (name, version) means
        (`engine.defaults.type_candidates`); an empty one, with the version named,
        when the type is not registered."""
        candidates = type_candidates(name, version)
        found = await self._store.registered_workflow_types(ns, candidates)
        return chosen_type(found, name, version)

    async def _history_page(
        self, run_id: str, first_id: int, last_id: int, size: int, wait_new: bool
    ) -> s.GetWorkflowHistoryResponse:
        """A page of events from `first_id`; up to `last_id` if set (a decision task's
        window, which exists in full already), else up to the run's end, waiting for
        the next event if asked to."""
        if last_id:
            # A decision task's window: often all in this node's memory (it just
            # wrote those events; a run's tail there is within a page's bytes),
            # else read in a page bounded in bytes.
            held = None
            if last_id - first_id < size:
                held = self._store.cached_events(run_id, first_id, last_id)
            if held is not None:
                events = held
            else:
                events = await self._store.read_history(
                    run_id, first_id, last_id, size, HISTORY_PAGE_BYTES
                )
            more = bool(events) and events[-1].event_id < last_id
        else:
            events, more = await follow.tail(
                self._store,
                self._wakeups,
                run_id,
                first_id,
                size,
                HISTORY_PAGE_BYTES,
                wait_new,
                self._settings.long_poll,
                lambda: self.draining,
            )
        nxt = events[-1].event_id + 1 if events else first_id
        token = paging.encode(run_id, nxt, last_id) if more else b""
        return s.GetWorkflowHistoryResponse(events=events, next_page_token=token, run_id=run_id)

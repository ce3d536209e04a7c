"""weft.v1.WorkflowService: validate, map to an engine command, run it through
the store, answer. No business rules here: those live in the engine."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf.timestamp_pb2 import Timestamp

from orchestrator.dispatch.wakeups import Wakeups, wait
from orchestrator.engine import activity as activities
from orchestrator.engine import external
from orchestrator.engine.decisions import (
    ActivityDefaults,
    DecisionContext,
    complete_decision_task,
    fail_decision_task,
    start_decision_task,
)
from orchestrator.engine.derived import ACTIVITY, DECISION
from orchestrator.engine.errors import InvalidArgument
from orchestrator.engine.limits import Defaults, Limits
from orchestrator.engine.start import StartCommand, start_workflow
from orchestrator.engine.state import RunKey, RunState
from orchestrator.engine.tokens import TaskToken
from orchestrator.engine.transition import Transition, duration
from orchestrator.metrics import Metrics
from orchestrator.store.store import RunRow, Store, TaskListKey
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg

from . import paging, validate
from .errors import grpc_errors
from .tokens import TokenCodec

log = structlog.get_logger("weft.api")
R = TypeVar("R")

Ctx = grpc.aio.ServicerContext[Any, Any]
HISTORY_PAGE = 1000
_RECHECK = 2.0  # a missed cross-node wake-up costs at most this much latency
_STATUS = {
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
    limits: Limits = field(default_factory=Limits)
    defaults: Defaults = field(default_factory=Defaults)


def _ts(at: datetime | float | None) -> Timestamp:
    stamp = Timestamp()
    if at is None or at == 0:
        return stamp
    stamp.FromDatetime(at if isinstance(at, datetime) else datetime.fromtimestamp(at, UTC))
    return stamp


def _optional(msg: Any, field_name: str) -> c.Payload | None:
    value: c.Payload | None = getattr(msg, field_name) if msg.HasField(field_name) else None
    return value


def _info(row: RunRow, version: str = "") -> c.WorkflowExecutionInfo:
    info = c.WorkflowExecutionInfo(
        execution=c.WorkflowExecution(workflow_id=row.key.workflow_id, run_id=row.key.run_id),
        workflow_type=c.WorkflowType(name=row.workflow_type, version=version),
        task_list=row.task_list,
        status=_STATUS[row.status],
        start_time=_ts(row.start_time),
        history_length=row.history_length,
        continued_from_run_id=row.continued_from_run_id,
    )
    if row.close_time is not None:
        info.close_time.CopyFrom(_ts(row.close_time))
    return info


class WorkflowService(sg.WorkflowServiceServicer):
    def __init__(
        self,
        store: Store,
        tokens: TokenCodec,
        wakeups: Wakeups,
        settings: ServiceSettings,
        metrics: Metrics,
    ) -> None:
        self.metrics = metrics
        self._store = store
        self._tokens = tokens
        self._wakeups = wakeups
        self._settings = settings
        self.draining = False

    # -- starting and talking to workflows --------------------------------------

    async def _start_command(self, req: s.StartWorkflowRequest, ns: str) -> StartCommand:
        validate.name("workflow_id", req.workflow_id, self._settings.limits.id_length)
        wtype = req.workflow_type
        validate.name("workflow_type.name", wtype.name)
        validate.payload_sizes(req, self._settings.limits)
        registered = (
            await self._store.registered_types("workflow", ns, [(wtype.name, wtype.version)])
        ).get((wtype.name, wtype.version), {})
        task_list = req.task_list or registered.get("default_task_list") or ""
        if not task_list:
            raise InvalidArgument(
                "task_list is required (the workflow type has no registered default)"
            )
        validate.name("task_list", task_list)
        defaults = self._settings.defaults
        execution = validate.optional_seconds(req, "execution_timeout")
        decider = validate.optional_seconds(req, "decider_timeout")
        return StartCommand(
            type_name=wtype.name,
            type_version=wtype.version,
            task_list=task_list,
            input=_optional(req, "input"),
            execution_timeout=execution
            or registered.get("default_execution_timeout")
            or defaults.execution_timeout,
            decider_timeout=decider
            or registered.get("default_decider_timeout")
            or defaults.decider_timeout,
            identity=req.identity,
        )

    @grpc_errors
    async def StartWorkflow(self, req: s.StartWorkflowRequest, ctx: Ctx) -> s.StartWorkflowResponse:
        ns = validate.namespace(req.namespace)
        cmd = await self._start_command(req, ns)
        run_id, _, started = await self._store.create(
            ns,
            req.workflow_id,
            str(uuid.uuid4()),
            req.request_id,
            lambda t: start_workflow(t, cmd),
        )
        if started:
            log.info("workflow.started", namespace=ns, workflow_id=req.workflow_id, run_id=run_id)
        return s.StartWorkflowResponse(run_id=run_id)

    @grpc_errors
    async def SignalWithStartWorkflow(
        self, req: s.SignalWithStartWorkflowRequest, ctx: Ctx
    ) -> s.SignalWithStartWorkflowResponse:
        start = req.start
        ns = validate.namespace(start.namespace)
        cmd = await self._start_command(start, ns)
        validate.name("signal_name", req.signal_name)
        validate.payload_sizes(req, self._settings.limits)
        payload = _optional(req, "signal_input")
        limits = self._settings.limits

        def send(t: Transition) -> None:
            external.signal(t, req.signal_name, payload, start.identity, limits)

        def start_and_send(t: Transition) -> None:
            start_workflow(t, cmd)
            send(t)

        run_id, _, started = await self._store.create(
            ns, start.workflow_id, str(uuid.uuid4()), start.request_id, start_and_send, send
        )
        return s.SignalWithStartWorkflowResponse(run_id=run_id, started=started)

    async def _run(self, ns: str, execution: c.WorkflowExecution) -> RunRow:
        validate.name("execution.workflow_id", execution.workflow_id)
        return await self._store.find_run(ns, execution.workflow_id, execution.run_id)

    @grpc_errors
    async def SignalWorkflow(
        self, req: s.SignalWorkflowRequest, ctx: Ctx
    ) -> s.SignalWorkflowResponse:
        ns = validate.namespace(req.namespace)
        validate.name("signal_name", req.signal_name)
        validate.payload_sizes(req, self._settings.limits)
        row = await self._run(ns, req.execution)
        payload = _optional(req, "input")
        limits = self._settings.limits
        await self._store.transact_once(
            row.key.run_id,
            "signal",
            req.request_id,
            lambda t: external.signal(t, req.signal_name, payload, req.identity, limits),
        )
        return s.SignalWorkflowResponse()

    @grpc_errors
    async def RequestCancelWorkflow(
        self, req: s.RequestCancelWorkflowRequest, ctx: Ctx
    ) -> s.RequestCancelWorkflowResponse:
        ns = validate.namespace(req.namespace)
        row = await self._run(ns, req.execution)
        await self._store.transact_once(
            row.key.run_id,
            "cancel",
            req.request_id,
            lambda t: external.request_cancel(t, req.reason, req.identity),
        )
        return s.RequestCancelWorkflowResponse()

    @grpc_errors
    async def TerminateWorkflow(
        self, req: s.TerminateWorkflowRequest, ctx: Ctx
    ) -> s.TerminateWorkflowResponse:
        ns = validate.namespace(req.namespace)
        validate.payload_sizes(req, self._settings.limits)
        row = await self._run(ns, req.execution)
        details = _optional(req, "details")
        await self._store.transact(
            row.key.run_id, lambda t: external.terminate(t, req.reason, details, req.identity)
        )
        log.info("workflow.terminated", namespace=ns, workflow_id=row.key.workflow_id)
        return s.TerminateWorkflowResponse()

    # -- history and visibility ---------------------------------------------------

    @grpc_errors
    async def GetWorkflowHistory(
        self, req: s.GetWorkflowHistoryRequest, ctx: Ctx
    ) -> s.GetWorkflowHistoryResponse:
        ns = validate.namespace(req.namespace)
        size = req.page_size if 0 < req.page_size <= HISTORY_PAGE else HISTORY_PAGE
        first_id, last_id = 1, 0
        if req.next_page_token:
            run_id, first_id, last_id = paging.decode(req.next_page_token, (str, int, int))
            row = await self._store.find_run(ns, req.execution.workflow_id, run_id)
        else:
            row = await self._run(ns, req.execution)
        return await self._history_page(row, first_id, last_id, size, req.wait_new_event)

    async def _history_page(
        self, row: RunRow, first_id: int, last_id: int, size: int, wait_new: bool
    ) -> s.GetWorkflowHistoryResponse:
        run_id = row.key.run_id
        deadline = asyncio.get_running_loop().time() + self._settings.long_poll
        while True:
            woken = self._wakeups.current(("run", run_id))
            # Status first: if the run was closed before we read, the read sees its last event.
            state = await self._store.load_state(run_id)
            events = await self._store.read_history(run_id, first_id, last_id or None, size)
            remaining = deadline - asyncio.get_running_loop().time()
            if events or not wait_new or not state.is_open or last_id or self.draining:
                break
            if remaining <= 0:
                break
            await wait(woken, min(remaining, _RECHECK))
        nxt = events[-1].event_id + 1 if events else first_id
        # The state was read before the events: a closed run's length is final.
        more = (nxt <= last_id) if last_id else (state.is_open or nxt < state.next_event_id)
        token = paging.encode(run_id, nxt, last_id) if more else b""
        return s.GetWorkflowHistoryResponse(events=events, next_page_token=token, run_id=run_id)

    @grpc_errors
    async def DescribeWorkflow(
        self, req: s.DescribeWorkflowRequest, ctx: Ctx
    ) -> s.DescribeWorkflowResponse:
        ns = validate.namespace(req.namespace)
        row = await self._run(ns, req.execution)
        st = await self._store.load_state(row.key.run_id)
        d = st.decider
        decider_state = "+".join(
            name for name, on in (("started", d.started_id), ("scheduled", d.scheduled_id)) if on
        )
        resp = s.DescribeWorkflowResponse(
            info=_info(row, st.type_version),
            decider_state=decider_state or "none",
            execution_timeout=duration(st.execution_timeout),
            decider_timeout=duration(st.decider_timeout),
            cancel_requested=st.cancel_requested,
        )
        for act in st.activities.values():
            p = resp.pending_activities.add(
                activity_id=act.activity_id,
                activity_type=c.ActivityType(name=act.type_name, version=act.type_version),
                state="cancel_requested"
                if act.cancel_requested_id
                else "started"
                if act.started_id
                else "scheduled",
                scheduled_event_id=act.scheduled_id,
                started_event_id=act.started_id,
                task_list=act.task_list,
                identity=act.identity,
            )
            details = activities.last_heartbeat(act)
            if details is not None:
                p.heartbeat_details.CopyFrom(details)
            if act.last_heartbeat_at:
                p.last_heartbeat_time.CopyFrom(_ts(act.last_heartbeat_at))
        for timer in st.timers.values():
            resp.pending_timers.add(
                timer_id=timer.timer_id,
                started_event_id=timer.started_id,
                fire_time=_ts(timer.fire_at),
            )
        return resp

    @grpc_errors
    async def ListWorkflows(self, req: s.ListWorkflowsRequest, ctx: Ctx) -> s.ListWorkflowsResponse:
        ns = validate.namespace(req.namespace)
        size = req.page_size if 0 < req.page_size <= 1000 else 100
        after = None
        if req.next_page_token:
            at, rid = paging.decode(req.next_page_token, (str, str))
            try:
                after = (datetime.fromisoformat(at), rid)
            except ValueError as exc:
                raise InvalidArgument("next_page_token is malformed") from exc
        open_only = {s.STATUS_FILTER_OPEN: True, s.STATUS_FILTER_CLOSED: False}.get(
            req.status_filter
        )
        rows = await self._store.list_runs(
            ns,
            open_only=open_only,
            workflow_type=req.workflow_type,
            workflow_id=req.workflow_id,
            start_from=req.start_time_from.ToDatetime()
            if req.HasField("start_time_from")
            else None,
            start_to=req.start_time_to.ToDatetime() if req.HasField("start_time_to") else None,
            after=after,
            limit=size,
        )
        token = b""
        if len(rows) == size:
            last = rows[-1]
            token = paging.encode(last.start_time.replace(tzinfo=None).isoformat(), last.key.run_id)
        return s.ListWorkflowsResponse(executions=[_info(r) for r in rows], next_page_token=token)

    # -- decision tasks ---------------------------------------------------------------

    async def _long_poll(self, key: TaskListKey, identity: str, claim: Callable[[], Any]) -> Any:
        """Claim a task, or wait until one is committed, until the long poll expires."""
        await self._store.record_poller(key, identity)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.long_poll
        while not self.draining:
            woken = self._wakeups.current(key)
            got = await claim()
            if got is not None:
                return got
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            await wait(woken, min(remaining, _RECHECK))
        return None

    @grpc_errors
    async def PollForDecisionTask(
        self, req: s.PollForDecisionTaskRequest, ctx: Ctx
    ) -> s.PollForDecisionTaskResponse:
        ns = validate.namespace(req.namespace)
        validate.name("task_list", req.task_list)
        key = TaskListKey(ns, DECISION, req.task_list)

        def take(t: Transition, scheduled_id: int) -> tuple[RunState, int]:
            started = start_decision_task(t, scheduled_id, req.identity)
            return t.state, started.event_id

        got = await self._long_poll(
            key, req.identity, lambda: self._store.claim(ns, DECISION, req.task_list, take)
        )
        if got is None:
            return s.PollForDecisionTaskResponse()
        self.metrics.tasks_claimed.labels(DECISION).inc()
        state, started_id = got
        token = TaskToken(state.key, DECISION, state.decider.started_scheduled_id, started_id)
        page = await self._history_page(
            await self._store.find_run(ns, state.workflow_id, state.run_id),
            1,
            started_id,
            HISTORY_PAGE,
            False,
        )
        log.info(
            "decision.started",
            namespace=ns,
            workflow_id=state.workflow_id,
            run_id=state.run_id,
            event_id=started_id,
            task_list=req.task_list,
        )
        return s.PollForDecisionTaskResponse(
            task_token=self._tokens.encode(token),
            workflow_execution=c.WorkflowExecution(
                workflow_id=state.workflow_id, run_id=state.run_id
            ),
            workflow_type=c.WorkflowType(name=state.type_name, version=state.type_version),
            events=page.events,
            next_page_token=page.next_page_token,
            started_event_id=started_id,
            previous_started_event_id=state.decider.previous_started_id,
        )

    async def _answer(self, req: Any, kind: str, fn: Callable[[Transition, TaskToken], R]) -> R:
        """A worker's answer to its task: check the token, then apply `fn` to the run it names.

        The token is signed, so the run it names is the one we handed out; if
        that task is over, the engine says NOT_FOUND and nothing is appended.
        """
        token = self._tokens.decode(req.task_token, kind)
        validate.payload_sizes(req, self._settings.limits)
        result: R = await self._store.transact(token.key.run_id, lambda t: fn(t, token))
        return result

    @grpc_errors
    async def RespondDecisionTaskCompleted(
        self, req: s.RespondDecisionTaskCompletedRequest, ctx: Ctx
    ) -> s.RespondDecisionTaskCompletedResponse:
        wanted = {
            (d.schedule_activity.activity_type.name, d.schedule_activity.activity_type.version)
            for d in req.decisions
            if d.WhichOneof("attributes") == "schedule_activity"
        }
        namespace = self._tokens.decode(req.task_token, DECISION).key.namespace
        registered = await self._store.registered_types("activity", namespace, wanted)
        context = DecisionContext(
            limits=self._settings.limits,
            defaults=self._settings.defaults,
            activity_defaults={
                k: ActivityDefaults(
                    task_list=v["default_task_list"],
                    schedule_to_start=v["default_schedule_to_start"],
                    start_to_close=v["default_start_to_close"],
                    schedule_to_close=v["default_schedule_to_close"],
                    heartbeat=v["default_heartbeat"],
                )
                for k, v in registered.items()
            },
            new_run_id=str(uuid.uuid4()),
        )
        await self._answer(
            req,
            DECISION,
            lambda t, token: complete_decision_task(t, token, req.decisions, req.identity, context),
        )
        return s.RespondDecisionTaskCompletedResponse()

    @grpc_errors
    async def RespondDecisionTaskFailed(
        self, req: s.RespondDecisionTaskFailedRequest, ctx: Ctx
    ) -> s.RespondDecisionTaskFailedResponse:
        details = _optional(req, "details")
        await self._answer(
            req,
            DECISION,
            lambda t, token: fail_decision_task(t, token, req.cause, details, req.identity),
        )
        return s.RespondDecisionTaskFailedResponse()

    # -- activity tasks -----------------------------------------------------------------

    @grpc_errors
    async def PollForActivityTask(
        self, req: s.PollForActivityTaskRequest, ctx: Ctx
    ) -> s.PollForActivityTaskResponse:
        ns = validate.namespace(req.namespace)
        validate.name("task_list", req.task_list)
        key = TaskListKey(ns, ACTIVITY, req.task_list)

        def take(t: Transition, scheduled_id: int) -> tuple[RunKey, Any, int]:
            act = activities.start_activity_task(t, scheduled_id, req.identity)
            return t.state.key, act, t.events[0].event_id

        got = await self._long_poll(
            key, req.identity, lambda: self._store.claim(ns, ACTIVITY, req.task_list, take)
        )
        if got is None:
            return s.PollForActivityTaskResponse()
        self.metrics.tasks_claimed.labels(ACTIVITY).inc()
        run, act, started_id = got
        [scheduled] = await self._store.read_history(run.run_id, act.scheduled_id, None, 1)
        [started] = await self._store.read_history(run.run_id, started_id, None, 1)
        attrs = scheduled.activity_scheduled
        token = TaskToken(run, ACTIVITY, act.scheduled_id, started_id)
        log.info(
            "activity.started",
            namespace=ns,
            workflow_id=run.workflow_id,
            run_id=run.run_id,
            activity_id=act.activity_id,
            event_id=started_id,
            task_list=req.task_list,
        )
        resp = s.PollForActivityTaskResponse(
            task_token=self._tokens.encode(token),
            workflow_execution=c.WorkflowExecution(workflow_id=run.workflow_id, run_id=run.run_id),
            activity_id=act.activity_id,
            activity_type=attrs.activity_type,
            scheduled_event_id=act.scheduled_id,
            started_event_id=started_id,
            attempt=started.activity_started.attempt,
            scheduled_time=scheduled.timestamp,
            started_time=started.timestamp,
            namespace=ns,
        )
        if attrs.HasField("input"):
            resp.input.CopyFrom(attrs.input)
        for name in ("start_to_close_timeout", "heartbeat_timeout", "schedule_to_close_timeout"):
            if attrs.HasField(name):
                getattr(resp, name).CopyFrom(getattr(attrs, name))
        return resp

    @grpc_errors
    async def RecordActivityHeartbeat(
        self, req: s.RecordActivityHeartbeatRequest, ctx: Ctx
    ) -> s.RecordActivityHeartbeatResponse:
        details = _optional(req, "details")
        cancel = await self._answer(
            req, ACTIVITY, lambda t, token: activities.heartbeat(t, token, details)
        )
        return s.RecordActivityHeartbeatResponse(cancel_requested=cancel)

    @grpc_errors
    async def RespondActivityTaskCompleted(
        self, req: s.RespondActivityTaskCompletedRequest, ctx: Ctx
    ) -> s.RespondActivityTaskCompletedResponse:
        result = _optional(req, "result")
        await self._answer(
            req, ACTIVITY, lambda t, token: activities.complete(t, token, result, req.identity)
        )
        return s.RespondActivityTaskCompletedResponse()

    @grpc_errors
    async def RespondActivityTaskFailed(
        self, req: s.RespondActivityTaskFailedRequest, ctx: Ctx
    ) -> s.RespondActivityTaskFailedResponse:
        details = _optional(req, "details")
        await self._answer(
            req,
            ACTIVITY,
            lambda t, token: activities.fail(
                t, token, req.reason, details, req.non_retryable, req.identity
            ),
        )
        return s.RespondActivityTaskFailedResponse()

    @grpc_errors
    async def RespondActivityTaskCanceled(
        self, req: s.RespondActivityTaskCanceledRequest, ctx: Ctx
    ) -> s.RespondActivityTaskCanceledResponse:
        details = _optional(req, "details")
        await self._answer(
            req, ACTIVITY, lambda t, token: activities.canceled(t, token, details, req.identity)
        )
        return s.RespondActivityTaskCanceledResponse()

    # -- task lists and registrations ---------------------------------------------------

    @grpc_errors
    async def DescribeTaskList(
        self, req: s.DescribeTaskListRequest, ctx: Ctx
    ) -> s.DescribeTaskListResponse:
        ns = validate.namespace(req.namespace)
        validate.name("task_list", req.task_list)
        kind = {c.TASK_LIST_KIND_DECISION: DECISION, c.TASK_LIST_KIND_ACTIVITY: ACTIVITY}.get(
            req.kind
        )
        if kind is None:
            raise InvalidArgument("kind must be TASK_LIST_KIND_DECISION or TASK_LIST_KIND_ACTIVITY")
        key = TaskListKey(ns, kind, req.task_list)
        backlog = await self._store.backlog(ns, kind, req.task_list)
        seen = await self._store.recent_pollers(key, timedelta(minutes=5))
        return s.DescribeTaskListResponse(
            backlog=backlog,
            pollers=[s.Poller(identity=i, last_access_time=_ts(at)) for i, at in seen],
        )

    @grpc_errors
    async def RegisterWorkflowType(
        self, req: s.RegisterWorkflowTypeRequest, ctx: Ctx
    ) -> s.RegisterWorkflowTypeResponse:
        ns = validate.namespace(req.namespace)
        validate.name("workflow_type.name", req.workflow_type.name)
        validate.optional_name("default_task_list", req.default_task_list)
        await self._store.register_type(
            "workflow",
            ns,
            req.workflow_type.name,
            req.workflow_type.version,
            {
                "default_task_list": req.default_task_list,
                "default_execution_timeout": validate.optional_seconds(
                    req, "default_execution_timeout"
                ),
                "default_decider_timeout": validate.optional_seconds(
                    req, "default_decider_timeout"
                ),
                "description": req.description,
            },
        )
        return s.RegisterWorkflowTypeResponse()

    @grpc_errors
    async def RegisterActivityType(
        self, req: s.RegisterActivityTypeRequest, ctx: Ctx
    ) -> s.RegisterActivityTypeResponse:
        ns = validate.namespace(req.namespace)
        validate.name("activity_type.name", req.activity_type.name)
        validate.optional_name("default_task_list", req.default_task_list)
        values: dict[str, Any] = {
            "default_task_list": req.default_task_list,
            "description": req.description,
        }
        for name in ("schedule_to_start", "start_to_close", "schedule_to_close", "heartbeat"):
            values[f"default_{name}"] = validate.optional_seconds(req, f"default_{name}_timeout")
        await self._store.register_type(
            "activity", ns, req.activity_type.name, req.activity_type.version, values
        )
        return s.RegisterActivityTypeResponse()

"""weft.v1.WorkflowService: validate, map to an engine command, run it through
the store, answer. No business rules here: those live in the engine. The
worker half (polls and answers) is in `tasks.py`."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import structlog
from google.protobuf.message import Message

from orchestrator.engine import activity as activities
from orchestrator.engine import external
from orchestrator.engine.defaults import start_task_list, start_timeouts
from orchestrator.engine.errors import FailedPrecondition, InvalidArgument
from orchestrator.engine.start import StartCommand, start_workflow
from orchestrator.engine.transition import Transition, duration
from orchestrator.store.store import RunRow
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg

from . import paging, validate
from .common import (
    HISTORY_PAGE,
    STATUS_VALUES,
    Ctx,
    ServiceSettings,
    execution_info,
    optional_payload,
    timestamp,
)
from .doctor import Doctor, finding_proto
from .errors import grpc_errors
from .guard import check_run
from .task_lists import TaskListsApi
from .tasks import TaskService
from .workers import WorkerSessionsApi

__all__ = ["ServiceSettings", "WorkflowService"]

log = structlog.get_logger("weft.api")
R = TypeVar("R")


class WorkflowService(TaskService, TaskListsApi, WorkerSessionsApi, sg.WorkflowServiceServicer):
    # -- starting and talking to workflows --------------------------------------

    async def _start_command(self, req: s.StartWorkflowRequest, ns: str) -> StartCommand:
        validate.new_workflow_id("workflow_id", req.workflow_id, self._settings.limits)
        wtype = req.workflow_type
        validate.name("workflow_type.name", wtype.name)
        registered = await self._registered_type(ns, wtype.name, wtype.version)
        task_list = validate.name("task_list", start_task_list(registered, req.task_list))
        execution, decider = start_timeouts(
            registered,
            self._settings.defaults,
            validate.optional_seconds(req, "execution_timeout"),
            validate.optional_seconds(req, "decider_timeout"),
        )
        return StartCommand(
            type_name=wtype.name,
            type_version=registered.version,
            task_list=task_list,
            input=optional_payload(req, "input"),
            execution_timeout=execution,
            decider_timeout=decider,
            identity=req.identity,
            definition=registered.definition,
        )

    @grpc_errors
    async def StartWorkflow(self, req: s.StartWorkflowRequest, ctx: Ctx) -> s.StartWorkflowResponse:
        run_id, _ = await self.start(req)
        return s.StartWorkflowResponse(run_id=run_id)

    async def start(self, req: s.StartWorkflowRequest) -> tuple[str, bool]:
        """StartWorkflow's work: (run id, whether this call started it). The
        schedule runner starts its runs here too."""
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
        return run_id, started

    @grpc_errors
    async def SignalWithStartWorkflow(
        self, req: s.SignalWithStartWorkflowRequest, ctx: Ctx
    ) -> s.SignalWithStartWorkflowResponse:
        start = req.start
        ns = validate.namespace(start.namespace)
        cmd = await self._start_command(start, ns)
        validate.name("signal_name", req.signal_name)
        payload = optional_payload(req, "signal_input")
        limits = self._settings.limits

        def send(t: Transition) -> None:
            # The open run may be of another type than the one the start names.
            check_run("SignalWithStartWorkflow", ns, workflow_type=t.state.type_name)
            external.signal(t, req.signal_name, payload, start.identity, limits)

        def start_and_send(t: Transition) -> None:
            start_workflow(t, cmd)
            send(t)

        run_id, _, started = await self._store.create(
            ns, start.workflow_id, str(uuid.uuid4()), start.request_id, start_and_send, send
        )
        return s.SignalWithStartWorkflowResponse(run_id=run_id, started=started)

    async def _run(self, ns: str, execution: c.WorkflowExecution) -> RunRow:
        validate.workflow_id("execution.workflow_id", execution.workflow_id, self._settings.limits)
        return await self._store.find_run(ns, execution.workflow_id, execution.run_id)

    async def _on_current_run(
        self, ns: str, execution: c.WorkflowExecution, apply: Callable[[str], Awaitable[R]]
    ) -> R:
        """Apply to the named run or, without a run id, to the workflow's current run.

        The current run may continue as new between our lookup and our write; the
        workflow is still running then, so look again instead of saying "closed".
        """
        row = await self._run(ns, execution)
        try:
            return await apply(row.key.run_id)
        except FailedPrecondition:
            if execution.run_id:
                raise
            latest = await self._run(ns, execution)
            if latest.key.run_id == row.key.run_id or latest.status != "open":
                raise
            return await apply(latest.key.run_id)

    @grpc_errors
    async def SignalWorkflow(
        self, req: s.SignalWorkflowRequest, ctx: Ctx
    ) -> s.SignalWorkflowResponse:
        ns = validate.namespace(req.namespace)
        validate.name("signal_name", req.signal_name)
        payload = optional_payload(req, "input")
        limits = self._settings.limits

        def send(t: Transition) -> None:
            check_run("SignalWorkflow", ns, workflow_type=t.state.type_name)
            external.signal(t, req.signal_name, payload, req.identity, limits)

        await self._on_current_run(
            ns,
            req.execution,
            lambda run_id: self._store.transact_once(run_id, "signal", req.request_id, send),
        )
        return s.SignalWorkflowResponse()

    @grpc_errors
    async def RequestCancelWorkflow(
        self, req: s.RequestCancelWorkflowRequest, ctx: Ctx
    ) -> s.RequestCancelWorkflowResponse:
        ns = validate.namespace(req.namespace)

        def cancel(t: Transition) -> None:
            check_run("RequestCancelWorkflow", ns, workflow_type=t.state.type_name)
            external.request_cancel(t, req.reason, req.identity)

        await self._on_current_run(
            ns,
            req.execution,
            lambda run_id: self._store.transact_once(run_id, "cancel", req.request_id, cancel),
        )
        return s.RequestCancelWorkflowResponse()

    @grpc_errors
    async def TerminateWorkflow(
        self, req: s.TerminateWorkflowRequest, ctx: Ctx
    ) -> s.TerminateWorkflowResponse:
        ns = validate.namespace(req.namespace)
        details = optional_payload(req, "details")
        await self._on_current_run(
            ns,
            req.execution,
            lambda run_id: self._store.transact(
                run_id, lambda t: external.terminate(t, req.reason, details, req.identity)
            ),
        )
        log.info("workflow.terminated", namespace=ns, workflow_id=req.execution.workflow_id)
        return s.TerminateWorkflowResponse()

    # -- history and visibility ---------------------------------------------------

    @grpc_errors
    async def GetWorkflowHistory(
        self, req: s.GetWorkflowHistoryRequest, ctx: Ctx
    ) -> s.GetWorkflowHistoryResponse:
        ns = validate.namespace(req.namespace)
        size = req.page_size if 0 < req.page_size <= HISTORY_PAGE else HISTORY_PAGE
        if req.first_event_id < 0:
            raise InvalidArgument("first_event_id must be 0 or more")
        first_id, last_id = max(1, req.first_event_id), 0
        if req.next_page_token:
            run_id, first_id, last_id = paging.decode(req.next_page_token, (str, int, int))
            row = await self._store.find_run(ns, req.execution.workflow_id, run_id)
        else:
            row = await self._run(ns, req.execution)
        # A worker narrowed to task lists reads the runs decided on them.
        check_run("GetWorkflowHistory", ns, task_list=row.task_list)
        return await self._history_page(row.key.run_id, first_id, last_id, size, req.wait_new_event)

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
        if d.retry_pending:
            decider_state = "retrying"
        resp = s.DescribeWorkflowResponse(
            info=execution_info(row, st.type_version),
            decider_state=decider_state or "none",
            execution_timeout=duration(st.execution_timeout),
            decider_timeout=duration(st.decider_timeout),
            cancel_requested=st.cancel_requested,
            decider_attempt=d.attempt if st.is_open else 0,
            decider_failure_cause=d.failure_cause,
            decider_failure_message=d.failure_message,
            started_by=st.started_by,
        )
        if d.backoff_until:
            resp.decider_retry_time.CopyFrom(timestamp(d.backoff_until))
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
                principal=act.principal,
            )
            details = activities.last_heartbeat(act)
            if details is not None:
                p.heartbeat_details.CopyFrom(details)
            if act.last_heartbeat_at:
                p.last_heartbeat_time.CopyFrom(timestamp(act.last_heartbeat_at))
        for timer in st.timers.values():
            resp.pending_timers.add(
                timer_id=timer.timer_id,
                started_event_id=timer.started_id,
                fire_time=timestamp(timer.fire_at),
            )
        for lock in sorted(st.locks.values(), key=lambda lk: lk.requested_id):
            resp.locks.add(
                lock_name=lock.lock_name,
                state="held" if lock.held else "waiting",
                requested_event_id=lock.requested_id,
                acquired_event_id=lock.acquired_id,
            )
        problems = await Doctor(self._store, self._pollers, self._settings.limits).run(row, st)
        resp.problems.extend(finding_proto(f) for f in problems)
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
            status=_status_name(req.status),
            workflow_type=req.workflow_type,
            workflow_id=req.workflow_id,
            workflow_id_prefix=req.workflow_id_prefix,
            task_list=req.task_list,
            start_from=_optional_time(req, "start_time_from"),
            start_to=_optional_time(req, "start_time_to"),
            after=after,
            limit=size,
        )
        token = b""
        if len(rows) == size:
            last = rows[-1]
            token = paging.encode(last.start_time.replace(tzinfo=None).isoformat(), last.key.run_id)
        return s.ListWorkflowsResponse(
            executions=[execution_info(r) for r in rows], next_page_token=token
        )

    @grpc_errors
    async def CountWorkflows(
        self, req: s.CountWorkflowsRequest, ctx: Ctx
    ) -> s.CountWorkflowsResponse:
        ns = validate.namespace(req.namespace)
        counts = await self._store.count_runs(
            ns,
            workflow_type=req.workflow_type,
            workflow_id_prefix=req.workflow_id_prefix,
            task_list=req.task_list,
            start_from=_optional_time(req, "start_time_from"),
            start_to=_optional_time(req, "start_time_to"),
        )
        return s.CountWorkflowsResponse(
            counts=[
                s.StatusCount(status=STATUS_VALUES[name], count=n)
                for name, n in sorted(counts.items(), key=lambda kv: STATUS_VALUES[kv[0]])
            ]
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
                # Checked against `Limits.definition_bytes` with the request.
                "definition": req.definition,
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


_STATUS_NAMES: dict[int, str] = {number: name for name, number in STATUS_VALUES.items()}


def _status_name(value: int) -> str:
    """The store's name of one exact status, "" for none."""
    if value == c.WORKFLOW_STATUS_UNSPECIFIED:
        return ""
    if value not in _STATUS_NAMES:
        raise InvalidArgument(f"status {value} is not a workflow status")
    return _STATUS_NAMES[value]


def _optional_time(msg: Message, field: str) -> datetime | None:
    if not msg.HasField(field):
        return None
    moment: datetime = getattr(msg, field).ToDatetime()
    return moment

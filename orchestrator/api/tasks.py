"""The worker side of WorkflowService: long polls that hand out decision and
activity tasks, and the workers' answers."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from orchestrator.engine import activity as activities
from orchestrator.engine import caller, external
from orchestrator.engine.context import DecisionContext
from orchestrator.engine.decisions import (
    complete_decision_task,
    fail_decision_task,
    start_decision_task,
)
from orchestrator.engine.defaults import RegisteredWorkflowType
from orchestrator.engine.derived import ACTIVITY, DECISION
from orchestrator.engine.errors import EngineError, InvalidArgument, NotFound
from orchestrator.engine.state import RunKey
from orchestrator.engine.tokens import TaskToken
from orchestrator.engine.transition import Transition
from orchestrator.store.store import TaskListKey
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1.decisions_pb2 import Decision
from sdk.api.weft.v1.history_pb2 import HistoryEvent

from . import validate
from .common import HISTORY_PAGE, POLLERS_SEEN_WITHIN, Ctx, ServiceBase, optional_payload, timestamp
from .errors import grpc_errors
from .guard import check_run, current_caller

log = structlog.get_logger("weft.api")


@dataclass(frozen=True)
class DecisionStart:
    """What a poll answers with, taken when its decision task starts: the run's
    state object changes after the write, these do not."""

    key: RunKey
    type_name: str
    type_version: str
    scheduled_id: int
    started_id: int
    attempt: int
    previous_started_id: int
    cached_by: str
    """The cache that holds the run up to `previous_started_id` ("" if none)."""

    @classmethod
    def of(cls, t: Transition, started_id: int) -> DecisionStart:
        s, d = t.state, t.state.decider
        return cls(
            s.key,
            s.type_name,
            s.type_version,
            d.started_scheduled_id,
            started_id,
            d.attempt,
            d.previous_started_id,
            d.cached_by,
        )


@dataclass(frozen=True)
class ActivityStart:
    key: RunKey
    activity_id: str
    scheduled_id: int
    started: HistoryEvent
    scheduled: HistoryEvent | None
    """The ActivityScheduled, when the same transition scheduled it."""

    @classmethod
    def of(cls, t: Transition, activity_id: str, scheduled_id: int) -> ActivityStart:
        started = t.events[-1]
        scheduled = next((e for e in t.events if e.event_id == scheduled_id), None)
        return cls(t.state.key, activity_id, scheduled_id, started, scheduled)


R = TypeVar("R")
# The answers to an activity task that may carry the runner's next poll.
ActivityAnswer = (
    s.RespondActivityTaskCompletedRequest
    | s.RespondActivityTaskFailedRequest
    | s.RespondActivityTaskCanceledRequest
)
P = TypeVar("P", s.PollForDecisionTaskResponse, s.PollForActivityTaskResponse)


class TaskService(ServiceBase):
    # -- decision tasks ---------------------------------------------------------------

    @grpc_errors
    async def PollForDecisionTask(
        self, req: s.PollForDecisionTaskRequest, ctx: Ctx
    ) -> s.PollForDecisionTaskResponse:
        ns, session = _validated_poll(req)
        return await self._poll_decision_task(
            req, ns, session, ctx.peer(), self._settings.long_poll
        )

    async def _poll_decision_task(
        self, req: s.PollForDecisionTaskRequest, ns: str, session: str, peer: str, wait: float
    ) -> s.PollForDecisionTaskResponse:
        """A decision poll, on its own or folded into an answer (`next_poll`),
        waiting up to `wait` seconds for a task."""
        self.sessions.check(session)
        key = TaskListKey(ns, DECISION, req.task_list)

        poller, who = caller.principal.get(), current_caller()

        def take(t: Transition, scheduled_id: int) -> DecisionStart:
            self.guard.still_admitted(who)  # (before anything is appended)
            with t.caused_by(poller):
                started = start_decision_task(t, scheduled_id, req.identity, session)
            return DecisionStart.of(t, started)

        got = await self.polls.poll_task_list(
            key,
            req.identity,
            peer,
            wait,
            lambda: self._store.claim(ns, DECISION, req.task_list, take),
            take,
            req.cache_id,
        )
        if got is None:
            return s.PollForDecisionTaskResponse()
        self.metrics.tasks_claimed.labels(DECISION).inc()
        run, started_id = got.key, got.started_id
        self.sessions.started(session, run.run_id)
        token = TaskToken(run, DECISION, got.scheduled_id, started_id, got.attempt, req.task_list)
        # A decider whose cache holds the run up to its previous task gets only
        # what came since; any other gets the whole history, in pages.
        sticky = bool(req.cache_id) and got.cached_by == req.cache_id
        first = got.previous_started_id + 1 if sticky and got.previous_started_id else 1
        page = await self._history_page(run.run_id, first, started_id, HISTORY_PAGE, False)
        log.info(
            "decision.started",
            namespace=ns,
            workflow_id=run.workflow_id,
            run_id=run.run_id,
            event_id=started_id,
            task_list=req.task_list,
        )
        return s.PollForDecisionTaskResponse(
            task_token=self._tokens.encode(token),
            workflow_execution=c.WorkflowExecution(workflow_id=run.workflow_id, run_id=run.run_id),
            workflow_type=c.WorkflowType(name=got.type_name, version=got.type_version),
            events=page.events,
            next_page_token=page.next_page_token,
            started_event_id=started_id,
            previous_started_event_id=got.previous_started_id,
            continue_as_new_suggested=self._settings.limits.suggests_continue_as_new(started_id),
            attempt=got.attempt,
            first_event_id=first,
        )

    async def _answer(
        self,
        req: Any,
        kind: str,
        fn: Callable[[Transition, TaskToken], R],
        token: TaskToken | None = None,
    ) -> R:
        """A worker's answer to its task: check the token (unless decoded already),
        then apply `fn` to the run it names.

        The token is signed, so the run it names is the one we handed out; if
        that task is over, the engine says NOT_FOUND and nothing is appended.
        """
        if token is None:
            token = self._tokens.decode(req.task_token, kind)
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
        decoded = self._tokens.decode(req.task_token, DECISION)
        fold = _folded_poll_target(req, "PollForDecisionTask")
        run = decoded.key
        namespace = run.namespace
        context = DecisionContext(
            limits=self._settings.limits,
            defaults=self._settings.defaults,
            activity_types=await self._store.registered_activity_types(namespace, wanted),
            # (Only a ContinueAsNew opens a run: the others need no id.)
            new_run_id=str(uuid.uuid4()) if _continues(req.decisions) else "",
            new_run_definition=await self._successor_definition(run, req.decisions),
            **await self._family_context(namespace, req.decisions),
        )
        await self._answer(
            req,
            DECISION,
            lambda t, token: complete_decision_task(
                t, token, req.decisions, req.identity, context, req.cache_id
            ),
            decoded,
        )
        if fold is None:
            return s.RespondDecisionTaskCompletedResponse()
        next_task = await self._folded_poll(
            lambda: self._poll_decision_task(req.next_poll, *fold, ctx.peer(), self._folded_wait),
            s.PollForDecisionTaskResponse,
        )
        return s.RespondDecisionTaskCompletedResponse(next_task=next_task)

    @property
    def _folded_wait(self) -> float:
        """How long a folded poll waits (`ServiceSettings.folded_poll` says why)."""
        return min(self._settings.long_poll, self._settings.folded_poll)

    async def _folded_poll(self, poll: Callable[[], Awaitable[P]], nothing: Callable[[], P]) -> P:
        """The poll a worker folded into its answer, run once the answer is
        committed. The answer stands whatever happens here, so a poll that may
        not wait (the session ended, the poll limits) or fails comes back as
        `nothing`, and the worker's next poll of its own meets the reason."""
        try:
            with self.guard.folded_poll():
                return await poll()
        except EngineError as exc:
            log.debug("poll.folded_refused", code=exc.code_name, reason=str(exc))
        except Exception:  # a bug or a lost database: logged, not the answer's failure
            log.exception("poll.folded_failed")
        return nothing()

    async def _family_context(self, ns: str, decisions: Sequence[Decision]) -> dict[str, Any]:
        """What StartChildWorkflow and SignalExternalWorkflow decisions need to know of
        other runs, read before the answer's transaction. A run that opens or closes
        in between makes the store's write conflict (the child's unique open id, a
        closed signal target): the answer is ABORTED and, retried, decided afresh."""
        starts = [x.start_child_workflow for x in decisions if x.HasField("start_child_workflow")]
        signals = [
            x.signal_external_workflow for x in decisions if x.HasField("signal_external_workflow")
        ]
        if not starts and not signals:
            return {}
        child_types: dict[tuple[str, str], RegisteredWorkflowType] = {}
        open_workflows: set[str] = set()
        for child in starts:
            wtype = child.workflow_type
            child_types[(wtype.name, wtype.version)] = await self._registered_type(
                ns, wtype.name, wtype.version
            )
            if await self._open_run(ns, child.workflow_id) is not None:
                open_workflows.add(child.workflow_id)
        targets: dict[tuple[str, str], tuple[str, str]] = {}
        limits = self._settings.limits
        for sig in signals:
            wid, run_id = sig.execution.workflow_id, sig.execution.run_id
            target = await self._open_run(ns, wid, run_id)
            if target is None:
                targets[(wid, run_id)] = ("", "UNKNOWN_EXTERNAL_WORKFLOW")
                continue
            state = await self._store.load_state(target)
            full = bool(external.signal_refusal(state, limits))
            targets[(wid, run_id)] = ("", "SIGNAL_LIMIT_EXCEEDED") if full else (target, "")
        return {
            "child_types": child_types,
            "child_run_ids": {child.workflow_id: str(uuid.uuid4()) for child in starts},
            "open_workflows": frozenset(open_workflows),
            "signal_targets": targets,
        }

    async def _open_run(self, ns: str, workflow_id: str, run_id: str = "") -> str | None:
        """The run a signal reaches: the named run, or else the workflow's open
        run; None when that run is not open (or there is none)."""
        try:
            row = await self._store.find_run(ns, workflow_id, run_id)
        except NotFound:
            return None
        return row.key.run_id if row.status == "open" else None

    async def _successor_definition(self, run: RunKey, decisions: Sequence[Decision]) -> str:
        """The registered definition of the type a ContinueAsNew decision starts
        (the run's own type unless the decision names another): the new run
        snapshots it as a start does. A run's type never changes, so reading it
        outside the answer's transaction is safe."""
        cont = next((x.continue_as_new for x in decisions if x.HasField("continue_as_new")), None)
        if cont is None:
            return ""
        name, version = cont.workflow_type.name, cont.workflow_type.version
        if not name:
            state = await self._store.load_state(run.run_id)
            name, version = state.type_name, state.type_version
        found = await self._store.registered_workflow_types(run.namespace, [(name, version)])
        registered = found.get((name, version))
        return registered.definition if registered is not None else ""

    @grpc_errors
    async def RespondDecisionTaskFailed(
        self, req: s.RespondDecisionTaskFailedRequest, ctx: Ctx
    ) -> s.RespondDecisionTaskFailedResponse:
        details = optional_payload(req, "details")
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
        ns, session = _validated_poll(req)
        return await self._poll_activity_task(
            req, ns, session, ctx.peer(), self._settings.long_poll
        )

    async def _poll_activity_task(
        self, req: s.PollForActivityTaskRequest, ns: str, session: str, peer: str, wait: float
    ) -> s.PollForActivityTaskResponse:
        """An activity poll, on its own or folded into an answer (`next_poll`),
        waiting up to `wait` seconds for a task."""
        self.sessions.check(session)
        key = TaskListKey(ns, ACTIVITY, req.task_list)

        poller, who = caller.principal.get(), current_caller()

        def take(t: Transition, scheduled_id: int) -> ActivityStart:
            self.guard.still_admitted(who)  # (before anything is appended)
            with t.caused_by(poller):
                act = activities.start_activity_task(t, scheduled_id, req.identity, session)
            return ActivityStart.of(t, act.activity_id, scheduled_id)

        got = await self.polls.poll_task_list(
            key,
            req.identity,
            peer,
            wait,
            lambda: self._store.claim(ns, ACTIVITY, req.task_list, take),
            take,
        )
        if got is None:
            return s.PollForActivityTaskResponse()
        self.metrics.tasks_claimed.labels(ACTIVITY).inc()
        run, started = got.key, got.started
        self.sessions.started(session, run.run_id)
        started_id = started.event_id
        # The input is not in the run state: its ActivityScheduled event has it
        # (in the transition that handed the task over, or in the history).
        scheduled = got.scheduled
        if scheduled is None:
            [scheduled] = await self._store.events_between(
                run.run_id, got.scheduled_id, got.scheduled_id
            )
        attrs = scheduled.activity_scheduled
        token = TaskToken(run, ACTIVITY, got.scheduled_id, started_id, 1, req.task_list)
        log.info(
            "activity.started",
            namespace=ns,
            workflow_id=run.workflow_id,
            run_id=run.run_id,
            activity_id=got.activity_id,
            event_id=started_id,
            task_list=req.task_list,
        )
        resp = s.PollForActivityTaskResponse(
            task_token=self._tokens.encode(token),
            workflow_execution=c.WorkflowExecution(workflow_id=run.workflow_id, run_id=run.run_id),
            activity_id=got.activity_id,
            activity_type=attrs.activity_type,
            scheduled_event_id=got.scheduled_id,
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
        details = optional_payload(req, "details")
        cancel = await self._answer(
            req, ACTIVITY, lambda t, token: activities.heartbeat(t, token, details)
        )
        return s.RecordActivityHeartbeatResponse(cancel_requested=cancel)

    @grpc_errors
    async def RespondActivityTaskCompleted(
        self, req: s.RespondActivityTaskCompletedRequest, ctx: Ctx
    ) -> s.RespondActivityTaskCompletedResponse:
        result = optional_payload(req, "result")
        next_task = await self._activity_answer(
            req, lambda t, token: activities.complete(t, token, result, req.identity), ctx
        )
        return s.RespondActivityTaskCompletedResponse(next_task=next_task)

    @grpc_errors
    async def RespondActivityTaskFailed(
        self, req: s.RespondActivityTaskFailedRequest, ctx: Ctx
    ) -> s.RespondActivityTaskFailedResponse:
        details = optional_payload(req, "details")
        next_task = await self._activity_answer(
            req,
            lambda t, token: activities.fail(
                t, token, req.reason, details, req.non_retryable, req.identity
            ),
            ctx,
        )
        return s.RespondActivityTaskFailedResponse(next_task=next_task)

    @grpc_errors
    async def RespondActivityTaskCanceled(
        self, req: s.RespondActivityTaskCanceledRequest, ctx: Ctx
    ) -> s.RespondActivityTaskCanceledResponse:
        details = optional_payload(req, "details")
        next_task = await self._activity_answer(
            req, lambda t, token: activities.canceled(t, token, details, req.identity), ctx
        )
        return s.RespondActivityTaskCanceledResponse(next_task=next_task)

    async def _activity_answer(
        self, req: ActivityAnswer, fn: Callable[[Transition, TaskToken], None], ctx: Ctx
    ) -> s.PollForActivityTaskResponse | None:
        """A runner's answer to its activity task, then the poll it folded in
        (None when it folded none)."""
        fold = _folded_poll_target(req, "PollForActivityTask")
        await self._answer(req, ACTIVITY, fn)
        if fold is None:
            return None
        return await self._folded_poll(
            lambda: self._poll_activity_task(req.next_poll, *fold, ctx.peer(), self._folded_wait),
            s.PollForActivityTaskResponse,
        )

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
        # Every node's written sightings, and this node's not written yet.
        seen = {
            identity: at.timestamp()
            for identity, at in await self._store.recent_pollers(key, POLLERS_SEEN_WITHIN)
        }
        since = time.time() - POLLERS_SEEN_WITHIN.total_seconds()
        for identity, at in self._pollers.recent(key, since).items():
            seen[identity] = max(at, seen.get(identity, 0.0))
        latest_first = sorted(seen.items(), key=lambda item: item[1], reverse=True)
        return s.DescribeTaskListResponse(
            backlog=backlog,
            pollers=[
                s.Poller(identity=i, last_access_time=timestamp(at)) for i, at in latest_first
            ],
        )


def _validated_poll(
    req: s.PollForDecisionTaskRequest | s.PollForActivityTaskRequest,
) -> tuple[str, str]:
    """(namespace, worker session) of a poll, or INVALID_ARGUMENT."""
    ns = validate.namespace(req.namespace)
    validate.name("task_list", req.task_list)
    return ns, validate.optional_name("worker_session_id", req.worker_session_id)


def _continues(decisions: Sequence[Decision]) -> bool:
    return any(x.HasField("continue_as_new") for x in decisions)


def _folded_poll_target(
    req: s.RespondDecisionTaskCompletedRequest | ActivityAnswer, rpc: str
) -> tuple[str, str] | None:
    """(namespace, worker session) of the poll folded into an answer, None if
    there is none. Checked before the answer is written: a malformed poll, or
    one the caller's grant does not cover, refuses the whole call."""
    if not req.HasField("next_poll"):
        return None
    ns, session = _validated_poll(req.next_poll)
    check_run(rpc, ns, task_list=req.next_poll.task_list)
    return ns, session

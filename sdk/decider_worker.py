"""`DeciderWorker`: polls decision task lists and runs `Decider.decide`.

    DeciderWorker(client, task_lists=["orders"], deciders=[Order()]).run()

Each task's whole history is read (following pages), folded into a
`DecisionTask`, decided, and answered with the decisions in one call.

A task the worker cannot decide is always answered as failed, with the cause:
`decide` raised (`DECIDER_EXCEPTION`), no decider for the type
(`UNKNOWN_WORKFLOW_TYPE`), the server refused the decisions (`BAD_DECISIONS`),
a payload in the history cannot be decoded (`UNDECODABLE_HISTORY`), or the
history could not be read (`HISTORY_UNAVAILABLE`). The server records the first
failure (`DeciderFailed`) and retries at once; failures in a row append nothing
and are retried after a backoff (`task.attempt` counts them), so a run that
cannot be decided shows why in `describe` without filling its history.
"""

from __future__ import annotations

import asyncio
import inspect
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1.history_pb2 import HistoryEvent
from sdk.client import AsyncClient
from sdk.converter import PayloadDecodeError
from sdk.decider import Decider, DecisionTask
from sdk.decider_cache import DEFAULT_BYTES as DEFAULT_CACHE_BYTES
from sdk.decider_cache import DEFAULT_SIZE as DEFAULT_CACHE_SIZE
from sdk.decider_cache import CachedRun, RunCache
from sdk.errors import (
    AnswerUnconfirmedError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    WeftError,
)
from sdk.events import Event, event_from_proto
from sdk.history import Fold
from sdk.sync_client import Client
from sdk.worker import DEFAULT_GRACE, Lane, Worker

log = structlog.get_logger("weft.decider")

TRACEBACK_CHARS = 16_000


@dataclass(frozen=True)
class TypeRegistration:
    """A workflow type a decider worker registers when it starts (a step
    definition, with its source, for `weft decider --definitions`)."""

    name: str
    version: str = ""
    task_list: str = ""
    execution_timeout: timedelta | None = None
    decider_timeout: timedelta | None = None
    description: str = ""
    definition: str = ""


class UnknownWorkflowType(LookupError):
    """No decider of this worker handles the task's workflow type."""


class DeciderWorker(Worker):
    """Runs `Decider`s for the decision tasks on its task lists.

    `task_lists` defaults to those the deciders name (`Decider.task_list`).
    """

    kind = "decision"
    poll_method = "PollForDecisionTask"

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        deciders: Sequence[Decider],
        task_lists: Sequence[str] = (),
        concurrency: int = 8,
        identity: str | None = None,
        grace: timedelta = DEFAULT_GRACE,
        pollers: int | None = None,
        register_types: bool = False,
        fallback: Decider | None = None,
        registrations: Sequence[TypeRegistration] = (),
        cache_size: int = DEFAULT_CACHE_SIZE,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.register_types = register_types
        # Runs decided here are kept (up to cache_size runs weighing cache_bytes;
        # a size of 0: none), so that their next tasks bring only new events.
        self.cache = RunCache(cache_size, cache_bytes) if cache_size else None
        self.fallback = fallback
        self.registrations = tuple(registrations)
        self.deciders: dict[tuple[str, str], Decider] = {}
        for decider in deciders:
            if not isinstance(decider, Decider):
                raise TypeError(f"{decider!r} is not a Decider instance")
            key = (decider.type_name(), decider.workflow_version)
            if key in self.deciders:
                raise ValueError(f"two deciders for workflow type {key[0]!r} {key[1]!r}")
            self.deciders[key] = decider
        lists = list(task_lists) or sorted({d.task_list for d in deciders if d.task_list})
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="weft-decide")
        super().__init__(
            client,
            task_lists=lists,
            concurrency=concurrency,
            identity=identity,
            grace=grace,
            pollers=pollers,
        )

    async def run_async(self) -> None:
        try:
            await super().run_async()
        finally:
            # Not the loop's default executor: `asyncio.run` would wait for a
            # `decide` that never returns, past any grace.
            self._pool.shutdown(wait=False, cancel_futures=True)

    async def _prepare(self) -> None:
        if self.register_types:
            await self._register_types()
        for item in self.registrations:
            await self.client.register_workflow_type(
                item.name,
                version=item.version,
                default_task_list=item.task_list,
                default_execution_timeout=item.execution_timeout,
                default_decider_timeout=item.decider_timeout,
                description=item.description,
                definition=item.definition,
            )
            log.info(
                "decider.registered",
                workflow_type=item.name,
                version=item.version,
                task_list=item.task_list,
            )

    async def _register_types(self) -> None:
        """Register each decider's workflow type with the task list it is polled on
        as the default, so `weft start TYPE` needs no `--task-list` (other registered
        defaults of the type are kept)."""
        for (name, version), decider in self.deciders.items():
            # The list this worker polls for it: the decider's own, unless told otherwise.
            if decider.task_list in self.task_lists:
                task_list = decider.task_list
            elif len(self.task_lists) == 1:
                task_list = self.task_lists[0]
            else:
                continue
            await self.client.register_workflow_type(
                name, version=version, default_task_list=task_list
            )
            log.info("decider.registered", workflow_type=name, task_list=task_list)

    def decider_for(self, name: str, version: str) -> Decider | None:
        """The decider of this exact version, else the one that takes any version,
        else the fallback (the step interpreter takes every run that carries a
        step definition)."""
        return self.deciders.get((name, version)) or self.deciders.get((name, "")) or self.fallback

    def _poll_request(self, task_list: str) -> s.PollForDecisionTaskRequest:
        return s.PollForDecisionTaskRequest(
            namespace=self.client.namespace,
            task_list=task_list,
            identity=self.identity,
            cache_id=self.cache.id if self.cache is not None else "",
            worker_session_id=self.session.id,
        )

    def _task_of(
        self, task_list: str, resp: s.PollForDecisionTaskResponse
    ) -> s.PollForDecisionTaskResponse | None:
        return resp if resp.task_token else None

    async def _handle(
        self, resp: s.PollForDecisionTaskResponse, lane: Lane
    ) -> s.PollForDecisionTaskResponse | None:
        where = {
            "workflow_id": resp.workflow_execution.workflow_id,
            "run_id": resp.workflow_execution.run_id,
            "workflow_type": resp.workflow_type.name,
            "event_id": resp.started_event_id,
        }
        try:
            held = await self._history(resp)
        except PayloadDecodeError as exc:
            await self._cannot_decide(resp, "UNDECODABLE_HISTORY", exc, where)
            return None
        except WeftError as exc:
            await self._cannot_decide(resp, "HISTORY_UNAVAILABLE", exc, where)
            return None
        task = DecisionTask(
            workflow_id=resp.workflow_execution.workflow_id,
            run_id=resp.workflow_execution.run_id,
            workflow_type=resp.workflow_type.name,
            version=resp.workflow_type.version,
            history=held.history,
            started_event_id=resp.started_event_id,
            previous_started_event_id=resp.previous_started_event_id,
            continue_as_new_suggested=resp.continue_as_new_suggested,
            attempt=resp.attempt or 1,
            view=held.fold.view,
        )
        decider = self.decider_for(resp.workflow_type.name, resp.workflow_type.version)
        try:
            if decider is None:
                raise UnknownWorkflowType(
                    f"no decider here for workflow type {resp.workflow_type.name!r}"
                    f" version {resp.workflow_type.version!r}"
                )
            await run_decider(decider, task, self._pool)
        except Exception as exc:
            cause = (
                "UNKNOWN_WORKFLOW_TYPE"
                if isinstance(exc, UnknownWorkflowType)
                else "DECIDER_EXCEPTION"
            )
            await self._cannot_decide(resp, cause, exc, where)
            return None
        if self.cache is not None and not task.closed:
            # Held before the answer goes: once it is written, the run's next
            # task may come to another poll of this worker while this answer's
            # folded poll still waits. (A run this task closes has no next task,
            # unless the close is refused: then its next one reads it whole.)
            self.cache.keep(task.run_id, held)
        answered = await self._respond(resp.task_token, task, where, lane)
        if answered is None:
            if self.cache is not None:
                self.cache.forget(task.run_id, held)
            return None
        return self._task_of(lane.task_list, answered.next_task)

    async def _history(self, resp: s.PollForDecisionTaskResponse) -> CachedRun:
        """The task's history and its fold: the cached run carried on with the
        events the task brings, or else the whole history, read and folded."""
        run_id = resp.workflow_execution.run_id
        cache = self.cache
        cached = cache.take(run_id, resp.previous_started_event_id) if cache is not None else None
        if resp.first_event_id > 1:
            if cache is not None and cached is not None:
                try:
                    raw = await self._pages(resp, list(resp.events))
                    new = self._decode(raw)
                except BaseException:
                    cache.keep(run_id, cached)  # unchanged: still good for a retry
                    raise
                cached.history.extend(new)
                cached.fold.add(new)
                cached.started_event_id = resp.started_event_id
                cached.size += _size(raw)
                return cached
            # The server thought this cache holds the run, and it does not (it was
            # evicted, or this worker restarted): read the history from the start.
            raw = await self._whole_history(resp)
        else:
            raw = await self._pages(resp, list(resp.events))
        events = self._decode(raw)
        return CachedRun(events, resp.started_event_id, Fold().add(events), _size(raw))

    def _decode(self, raw: list[HistoryEvent]) -> list[Event]:
        # Strict: deciding on a history with a hole in it could do anything.
        return [event_from_proto(e, self.client.converter, strict=True) for e in raw]

    async def _whole_history(self, resp: s.PollForDecisionTaskResponse) -> list[HistoryEvent]:
        """The run's history up to the task's DeciderStarted (the window: never
        an event after it)."""
        raw: list[HistoryEvent] = []
        token = b""
        while True:
            page = await self.client.rpc(
                "GetWorkflowHistory",
                s.GetWorkflowHistoryRequest(
                    namespace=self.client.namespace,
                    execution=resp.workflow_execution,
                    next_page_token=token,
                ),
            )
            raw.extend(e for e in page.events if e.event_id <= resp.started_event_id)
            token = page.next_page_token
            if not token or not page.events or page.events[-1].event_id >= resp.started_event_id:
                return raw

    async def _pages(
        self, resp: s.PollForDecisionTaskResponse, raw: list[HistoryEvent]
    ) -> list[HistoryEvent]:
        """`raw` (the task's first page) with the rest of the task's window."""
        token = resp.next_page_token
        while token:
            page = await self.client.rpc(
                "GetWorkflowHistory",
                s.GetWorkflowHistoryRequest(
                    namespace=self.client.namespace,
                    execution=c.WorkflowExecution(
                        workflow_id=resp.workflow_execution.workflow_id,
                        run_id=resp.workflow_execution.run_id,
                    ),
                    next_page_token=token,
                ),
            )
            raw.extend(page.events)
            token = page.next_page_token
        return raw

    async def _respond(
        self, token: bytes, task: DecisionTask, where: dict[str, Any], lane: Lane
    ) -> s.RespondDecisionTaskCompletedResponse | None:
        """Answer with the task's decisions, and the lane's next poll when it may
        fold one in; the response if the decisions were taken, else None."""
        converter = self.client.converter
        try:
            decisions = [decision.to_proto(converter) for decision in task.decisions]
            req = s.RespondDecisionTaskCompletedRequest(
                task_token=token,
                decisions=decisions,
                identity=self.identity,
                # (A run this task closes is not kept: its next task, if the
                # close is refused, must bring the whole history.)
                cache_id=self.cache.id if self.cache is not None and not task.closed else "",
            )
            resp = await self._send_answer(
                lane, "RespondDecisionTaskCompleted", req, s.RespondDecisionTaskCompletedResponse
            )
        except NotFoundError:
            log.warning("decision.stale", **where)
            return None
        except ResourceExhaustedError as exc:
            if exc.retry_after is None:
                await self._refused(token, exc, task, where)
            else:  # the worker's request rate, past the retry policy: not the decisions'
                log.error("decision.answer_failed", error=exc.message, **where)
            return None
        except (InvalidArgumentError, TypeError, ValueError) as exc:
            await self._refused(token, exc, task, where)
            return None
        except AnswerUnconfirmedError as exc:
            log.warning("decision.answer_unconfirmed", error=exc.message, **where)
            return None
        except WeftError as exc:
            log.error("decision.answer_failed", error=exc.message, **where)
            return None
        log.info("decision.completed", decisions=[d.kind for d in task.decisions], **where)
        return resp

    async def _refused(
        self, token: bytes, exc: Exception, task: DecisionTask, where: dict[str, Any]
    ) -> None:
        """The server refused the decisions as a whole (a payload over the limit,
        a bad name, a run's limit), or they could not be encoded: record why in
        the history."""
        message = exc.message if isinstance(exc, WeftError) else str(exc)
        log.error("decision.refused", error=message, attempt=task.attempt, **where)
        await self._fail_task(token, "BAD_DECISIONS", {"message": message}, where)

    async def _cannot_decide(
        self,
        resp: s.PollForDecisionTaskResponse,
        cause: str,
        exc: Exception,
        where: dict[str, Any],
    ) -> None:
        error = exc.message if isinstance(exc, WeftError) else f"{type(exc).__name__}: {exc}"
        log.error("decision.failed", cause=cause, error=error, attempt=resp.attempt or 1, **where)
        details = {
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": exc.message if isinstance(exc, WeftError) else str(exc),
            "traceback": "".join(traceback.format_exception(exc))[-TRACEBACK_CHARS:],
        }
        await self._fail_task(resp.task_token, cause, details, where)

    async def _fail_task(
        self, token: bytes, cause: str, details: dict[str, Any], where: dict[str, Any]
    ) -> None:
        try:
            await self.client.rpc(
                "RespondDecisionTaskFailed",
                s.RespondDecisionTaskFailedRequest(
                    task_token=token,
                    cause=cause,
                    details=self.client.converter.encode(details),
                    identity=self.identity,
                ),
            )
        except WeftError as exc:
            log.warning("decision.answer_failed", error=exc.message, **where)


def _size(raw: list[HistoryEvent]) -> int:
    return sum(e.ByteSize() for e in raw)


async def run_decider(
    decider: Decider, task: DecisionTask, pool: ThreadPoolExecutor | None = None
) -> None:
    """Call `decide`: async ones on the loop, sync ones in a thread (a slow decider
    must not stall the worker's other polls) unless the decider says it never
    blocks (`Decider.blocking = False`)."""
    if inspect.iscoroutinefunction(decider.decide):
        await decider.decide(task)  # type: ignore[misc,unused-ignore]
    elif not decider.blocking:
        decider.decide(task)
    else:
        await asyncio.get_running_loop().run_in_executor(pool, decider.decide, task)

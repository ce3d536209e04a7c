"""`ActivityWorker`: polls activity task lists and runs `@activity` functions.

    ActivityWorker(client, task_lists=["images"], activities=[resize], concurrency=16).run()

A returned value completes the task; a raised exception fails it, with the
exception's type, message and traceback in the failure details
(`NonRetryableError` marks it not worth retrying); cancellation learned on a
heartbeat cancels an async activity and flags a sync one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import structlog

from sdk.activity import (
    ActivityContext,
    ActivityDefinition,
    ActivityInfo,
    reset_context,
    set_context,
)
from sdk.api.weft.v1 import service_pb2 as s
from sdk.client import AsyncClient
from sdk.errors import (
    ActivityCancelledError,
    ActivityFailure,
    AnswerUnconfirmedError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    WeftError,
)
from sdk.sync_client import Client
from sdk.worker import DEFAULT_GRACE, Lane, Worker

log = structlog.get_logger("weft.runner")

# Failure details are a payload too: keep a traceback well inside the limit.
TRACEBACK_CHARS = 16_000
PAYLOAD_TOO_LARGE = "PayloadTooLarge"
R = TypeVar("R")


class ActivityWorker(Worker):
    """Runs `@activity` functions for the tasks on its task lists.

    `task_lists` defaults to those the activities name (`@activity(task_list=…)`).
    """

    kind = "activity"
    poll_method = "PollForActivityTask"

    def __init__(
        self,
        client: Client | AsyncClient,
        *,
        activities: Sequence[ActivityDefinition],
        task_lists: Sequence[str] = (),
        concurrency: int = 16,
        identity: str | None = None,
        grace: timedelta = DEFAULT_GRACE,
        pollers: int | None = None,
    ) -> None:
        self.activities: dict[str, ActivityDefinition] = {}
        for defn in activities:
            if not isinstance(defn, ActivityDefinition):
                raise TypeError(f"{defn!r} is not an @activity function")
            if defn.name in self.activities:
                raise ValueError(f"two activities are named {defn.name!r}")
            self.activities[defn.name] = defn
        lists = list(task_lists) or sorted({a.task_list for a in activities if a.task_list})
        super().__init__(
            client,
            task_lists=lists,
            concurrency=concurrency,
            identity=identity,
            grace=grace,
            pollers=pollers,
        )
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="weft-activity")

    async def run_async(self) -> None:
        try:
            await super().run_async()
        finally:
            # Threads still running a sync activity past the grace cannot be
            # stopped; do not wait for them.
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _poll_request(self, task_list: str) -> s.PollForActivityTaskRequest:
        return s.PollForActivityTaskRequest(
            namespace=self.client.namespace,
            task_list=task_list,
            identity=self.identity,
            worker_session_id=self.session.id,
        )

    def _task_of(
        self, task_list: str, resp: s.PollForActivityTaskResponse
    ) -> tuple[str, s.PollForActivityTaskResponse] | None:
        return (task_list, resp) if resp.task_token else None

    async def _handle(
        self, item: tuple[str, s.PollForActivityTaskResponse], lane: Lane
    ) -> tuple[str, s.PollForActivityTaskResponse] | None:
        task_list, task = item
        info = _info(task, self.client.namespace, task_list)
        where = {
            "workflow_id": info.workflow_id,
            "activity_id": info.activity_id,
            "activity": info.activity_type,
            "attempt": info.attempt,
        }
        log.info("activity.started", task_list=info.task_list, **where)
        defn = self.activities.get(info.activity_type)
        beat = _Heartbeater(self.client, task.task_token, self.identity, info.heartbeat)
        ctx = ActivityContext(info, beat.push)
        beat.on_cancel(ctx.cancel)
        try:
            try:
                if defn is None:
                    raise ActivityFailure(
                        f"this runner has no activity named {info.activity_type!r}",
                        reason="ActivityTypeNotRegistered",
                    )
                result = await self._run(defn, ctx, task, beat)
            finally:
                # Before any answer, which may wait in its folded poll: no
                # heartbeat goes out for a task that is over.
                beat.stop()
        except asyncio.CancelledError:
            if beat.expired:
                log.warning("activity.deadline_passed", outcome="stopped, not answered", **where)
                return None
            if beat.cancel_requested:
                return await self._canceled(task.task_token, where, lane)
            # The worker is shutting down past its grace: say so now, so the
            # decider can retry at once instead of at a timeout.
            shutdown = ActivityFailure("the worker shut down", reason="WorkerShutdown")
            await self._fail(task.task_token, where, shutdown)
            raise
        except ActivityCancelledError:
            return await self._canceled(task.task_token, where, lane)
        except Exception as exc:
            return await self._fail(task.task_token, where, exc, lane)
        return await self._complete(task.task_token, where, result, lane)

    async def _run(
        self,
        defn: ActivityDefinition,
        ctx: ActivityContext,
        task: s.PollForActivityTaskResponse,
        beat: _Heartbeater,
    ) -> Any:
        converter = self.client.converter
        args, kwargs = defn.arguments(converter.decode(task.input), converter)
        token = set_context(ctx)
        # Past its start-to-close the server has timed the task out: stop the
        # activity (cancel an async one, flag a sync one) so it frees its slot.
        limit = ctx.info.start_to_close
        expiry = (
            asyncio.get_running_loop().call_later(limit.total_seconds(), beat.expire)
            if limit
            else None
        )
        try:
            if defn.is_async:
                running = asyncio.ensure_future(defn.fn(*args, **kwargs))
                beat.on_cancel(running.cancel)
                return await running
            # The copied context carries the activity context into the thread.
            context = contextvars.copy_context()
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self._pool, lambda: context.run(defn.fn, *args, **kwargs)
            )
        finally:
            if expiry is not None:
                expiry.cancel()
            reset_context(token)

    async def _complete(
        self, token: bytes, where: dict[str, Any], result: Any, lane: Lane
    ) -> tuple[str, s.PollForActivityTaskResponse] | None:
        """Send the result, with the lane's next poll when it may fold one in;
        the task that poll got, if any."""
        try:
            payload = self.client.converter.encode(result)
        except (TypeError, ValueError) as exc:
            return await self._fail(token, where, exc, lane)
        req = s.RespondActivityTaskCompletedRequest(
            task_token=token, result=payload, identity=self.identity
        )
        try:
            resp = await self._send_answer(
                lane, "RespondActivityTaskCompleted", req, s.RespondActivityTaskCompletedResponse
            )
        except InvalidArgumentError as exc:
            # CONTRACT: a result over the limit fails the activity at once.
            reason = PAYLOAD_TOO_LARGE if "payload" in exc.message else "ResultRefused"
            return await self._fail(token, where, ActivityFailure(exc.message, reason=reason), lane)
        except (NotFoundError, FailedPreconditionError):
            log.warning("activity.stale", outcome="completed", **where)
            return None
        except AnswerUnconfirmedError as exc:
            log.warning(
                "activity.answer_unconfirmed", outcome="completed", error=exc.message, **where
            )
            return None
        except WeftError as exc:
            log.error("activity.answer_failed", outcome="completed", error=exc.message, **where)
            return None
        log.info("activity.completed", **where)
        return self._task_of(lane.task_list, resp.next_task)

    async def _fail(
        self, token: bytes, where: dict[str, Any], exc: BaseException, lane: Lane | None = None
    ) -> tuple[str, s.PollForActivityTaskResponse] | None:
        """Report the activity failed (with the lane's next poll when it may fold
        one in, as `_complete` does); the task that poll got, if any."""
        reason, details, non_retryable = failure_of(exc)
        try:
            payload = self.client.converter.encode(details)
        except (TypeError, ValueError):  # details the converter cannot encode
            details["details"] = repr(details.get("details"))[:TRACEBACK_CHARS]
            payload = self.client.converter.encode(details)
        req = s.RespondActivityTaskFailedRequest(
            task_token=token,
            reason=reason[:TRACEBACK_CHARS],
            details=payload,
            non_retryable=non_retryable,
            identity=self.identity,
        )
        failed = s.RespondActivityTaskFailedResponse
        resp = await self._answer_request("RespondActivityTaskFailed", req, where, lane, failed)
        if resp is None:
            return None
        log.info("activity.failed", reason=reason, error=details["message"], **where)
        return self._task_of(lane.task_list, resp.next_task) if lane is not None else None

    async def _canceled(
        self, token: bytes, where: dict[str, Any], lane: Lane
    ) -> tuple[str, s.PollForActivityTaskResponse] | None:
        req = s.RespondActivityTaskCanceledRequest(task_token=token, identity=self.identity)
        canceled = s.RespondActivityTaskCanceledResponse
        resp = await self._answer_request("RespondActivityTaskCanceled", req, where, lane, canceled)
        if resp is None:
            return None
        log.info("activity.canceled", **where)
        return self._task_of(lane.task_list, resp.next_task)

    async def _answer_request(
        self,
        method: str,
        req: Any,
        where: dict[str, Any],
        lane: Lane | None,
        nothing: Callable[[], R],
    ) -> R | None:
        """Send an answer other than a result, with the lane's next poll when it
        may fold one in (no lane: alone); its response, None if it was not taken."""
        try:
            if lane is None:
                alone: R = await self.client.rpc(method, req)
                return alone
            return await self._send_answer(lane, method, req, nothing)
        except (NotFoundError, FailedPreconditionError):
            # Timed out (NOT_FOUND), or its run closed (FAILED_PRECONDITION): the
            # task is no longer ours to answer.
            log.warning("activity.stale", outcome=method, **where)
        except AnswerUnconfirmedError as exc:
            log.warning("activity.answer_unconfirmed", outcome=method, error=exc.message, **where)
        except WeftError as exc:
            log.error("activity.answer_failed", outcome=method, error=exc.message, **where)
        return None


def failure_of(exc: BaseException) -> tuple[str, dict[str, Any], bool]:
    """(reason, details, non_retryable) for an exception raised by an activity."""
    if isinstance(exc, ActivityFailure):
        reason, extra, non_retryable = exc.reason, exc.details, exc.non_retryable
    else:
        reason, extra, non_retryable = type(exc).__name__, None, False
    trace = "".join(traceback.format_exception(type(exc), exc, _user_frames(exc.__traceback__)))
    details: dict[str, Any] = {
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": str(exc)[:TRACEBACK_CHARS],
        "traceback": trace[-TRACEBACK_CHARS:],
    }
    if extra is not None:
        details["details"] = extra
    return reason, details, non_retryable


# The worker's own frames, and the thread pool's that run a sync activity.
_PLUMBING = tuple(
    str(Path(module.__file__).resolve().parent) + os.sep
    for module in (sys.modules[__name__], concurrent.futures, asyncio)
    if module.__file__
)


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the first frame of the user's code: the frames that
    call the activity say nothing about its failure."""
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PLUMBING):
        tb = tb.tb_next
    return tb


def _info(task: s.PollForActivityTaskResponse, namespace: str, task_list: str) -> ActivityInfo:
    def span(name: Any) -> timedelta | None:
        return getattr(task, name).ToTimedelta() if task.HasField(name) else None

    def stamp(name: Any) -> Any:
        return getattr(task, name).ToDatetime(tzinfo=UTC) if task.HasField(name) else None

    return ActivityInfo(
        namespace=task.namespace or namespace,
        workflow_id=task.workflow_execution.workflow_id,
        run_id=task.workflow_execution.run_id,
        activity_id=task.activity_id,
        activity_type=task.activity_type.name,
        task_list=task_list,
        attempt=task.attempt,
        scheduled_event_id=task.scheduled_event_id,
        started_event_id=task.started_event_id,
        scheduled_time=stamp("scheduled_time"),
        started_time=stamp("started_time"),
        start_to_close=span("start_to_close_timeout"),
        heartbeat=span("heartbeat_timeout"),
        task_token=task.task_token,
    )


class _Heartbeater:
    """Sends an activity's heartbeats: the first at once, then at most one per
    interval (a third of the heartbeat timeout, at most 2 s), the latest details
    winning. Hears cancellation in the answers, and treats NOT_FOUND (the task
    timed out) and FAILED_PRECONDITION (its run closed) the same way."""

    def __init__(
        self, client: AsyncClient, token: bytes, identity: str, timeout: timedelta | None
    ) -> None:
        self._client = client
        self._token = token
        self._identity = identity
        self._interval = min(timeout.total_seconds() / 3, 2.0) if timeout else 2.0
        self._loop = asyncio.get_running_loop()
        self._details: Any = None
        self._wake = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._cancel_hooks: list[Callable[[], Any]] = []
        self.cancel_requested = False
        self.expired = False
        self.details_refused = False
        """Whether the server refused a heartbeat's details (the run's bound on
        them); the heartbeats went on without."""

    def on_cancel(self, hook: Callable[[], Any]) -> None:
        self._cancel_hooks.append(hook)

    def push(self, details: Any) -> None:
        """Queue a heartbeat; callable from the activity's thread or the loop."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._queue(details)
        else:
            self._loop.call_soon_threadsafe(self._queue, details)

    def stop(self) -> None:
        if self._sender is not None:
            self._sender.cancel()

    def expire(self) -> None:
        """The task's start-to-close has passed: stop the activity; nobody awaits its answer."""
        if not self.cancel_requested:
            self.expired = True
            for hook in self._cancel_hooks:
                hook()

    def _queue(self, details: Any) -> None:
        self._details = details
        self._wake.set()
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_loop())

    async def _send_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            req = s.RecordActivityHeartbeatRequest(
                task_token=self._token,
                details=self._client.converter.encode(self._details),
                identity=self._identity,
            )
            try:
                try:
                    resp = await self._client.rpc("RecordActivityHeartbeat", req)
                except ResourceExhaustedError as exc:
                    if exc.retry_after is not None:
                        raise
                    # The details would take the run past its bound on them: the
                    # heartbeat goes without, so that it still keeps the task
                    # alive and hears a cancel request.
                    if not self.details_refused:
                        log.warning("activity.heartbeat_details_refused", error=exc.message)
                    self.details_refused = True
                    req.ClearField("details")
                    resp = await self._client.rpc("RecordActivityHeartbeat", req)
                cancel = resp.cancel_requested
            except (NotFoundError, FailedPreconditionError):
                cancel = True  # the task timed out or its run closed: stop working on it
            except WeftError as exc:
                log.warning("activity.heartbeat_failed", error=exc.message)
                cancel = False
            if cancel and not self.cancel_requested:
                self.cancel_requested = True
                for hook in self._cancel_hooks:
                    hook()
            await asyncio.sleep(self._interval)

"""Test helpers: a small driver over the raw gRPC API, and condition waits."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from http.server import ThreadingHTTPServer
from typing import Any, TypeVar

from google.protobuf.duration_pb2 import Duration

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg

T = TypeVar("T")


class QuietHTTPServer(ThreadingHTTPServer):
    """A test HTTP server: a client that gave up (the tests of timeouts do) is no
    error of the test's, so no traceback on stderr."""

    def handle_error(self, request: object, client_address: object) -> None:
        pass


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def payload(value: Any) -> c.Payload:
    return c.Payload(data=json.dumps(value).encode(), encoding="json")


def dur(seconds: float) -> Duration:
    out = Duration()
    out.FromTimedelta(timedelta(seconds=seconds))
    return out


async def wait_until(
    check: Callable[[], Awaitable[T]], timeout: float = 15.0, interval: float = 0.05
) -> T:
    """Poll `check` until it returns something truthy; fail with the last value on timeout."""
    deadline = time.monotonic() + timeout
    last: T = await check()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")
        await asyncio.sleep(interval)
        last = await check()
    return last


def schedule(activity_id: str, name: str, task_list: str, **timeouts: float) -> d.Decision:
    attrs = d.ScheduleActivityDecision(
        activity_id=activity_id,
        activity_type=c.ActivityType(name=name),
        task_list=task_list,
        input=payload({"id": activity_id}),
    )
    for key, seconds in timeouts.items():
        getattr(attrs, f"{key}_timeout").CopyFrom(dur(seconds))
    return d.Decision(schedule_activity=attrs)


def complete(result: Any = None) -> d.Decision:
    return d.Decision(complete_workflow=d.CompleteWorkflowDecision(result=payload(result)))


class Driver:
    """Start a workflow and play decider and runner by hand, one call at a time."""

    def __init__(self, stub: sg.WorkflowServiceStub, namespace: str = "default") -> None:
        self.stub = stub
        self.namespace = namespace
        self.task_list = unique("tl")
        self.workflow_id = unique("wf")
        self.run_id = ""

    async def start(self, **fields: Any) -> str:
        resp = await self.stub.StartWorkflow(
            s.StartWorkflowRequest(
                namespace=self.namespace,
                workflow_id=self.workflow_id,
                workflow_type=c.WorkflowType(name="order"),
                task_list=self.task_list,
                input=payload({"order": 1}),
                **fields,
            )
        )
        self.run_id = resp.run_id
        return resp.run_id

    async def poll_decision(self) -> s.PollForDecisionTaskResponse:
        return await self.stub.PollForDecisionTask(
            s.PollForDecisionTaskRequest(
                namespace=self.namespace, task_list=self.task_list, identity="decider-1"
            )
        )

    async def decide(self, task: s.PollForDecisionTaskResponse, *decisions: d.Decision) -> None:
        assert task.task_token, "no decision task"
        await self.stub.RespondDecisionTaskCompleted(
            s.RespondDecisionTaskCompletedRequest(
                task_token=task.task_token, decisions=list(decisions), identity="decider-1"
            )
        )

    async def poll_activity(
        self, task_list: str, identity: str = "runner-1"
    ) -> s.PollForActivityTaskResponse:
        return await self.stub.PollForActivityTask(
            s.PollForActivityTaskRequest(
                namespace=self.namespace, task_list=task_list, identity=identity
            )
        )

    async def finish_activity(
        self, task: s.PollForActivityTaskResponse, result: Any = "ok"
    ) -> None:
        assert task.task_token, "no activity task"
        await self.stub.RespondActivityTaskCompleted(
            s.RespondActivityTaskCompletedRequest(
                task_token=task.task_token, result=payload(result), identity="runner-1"
            )
        )

    async def history(self) -> list[h.HistoryEvent]:
        events: list[h.HistoryEvent] = []
        token = b""
        while True:
            resp = await self.stub.GetWorkflowHistory(
                s.GetWorkflowHistoryRequest(
                    namespace=self.namespace,
                    execution=c.WorkflowExecution(workflow_id=self.workflow_id, run_id=self.run_id),
                    next_page_token=token,
                )
            )
            events.extend(resp.events)
            token = resp.next_page_token
            if not token or not resp.events:
                return events

    async def types(self) -> list[str]:
        return [e.type for e in await self.history()]


def rpc_calls(server: Any, method: str, code: str | None = None) -> float:
    """The calls of `method` an in-process `Server` answered (with status `code`,
    or whatever their status), from its RPC metrics."""
    return sum(
        sample.value
        for metric in server.metrics.registry.collect()
        for sample in metric.samples
        if sample.name == "weft_rpc_duration_seconds_count"
        and sample.labels["method"] == method
        and (code is None or sample.labels["code"] == code)
    )

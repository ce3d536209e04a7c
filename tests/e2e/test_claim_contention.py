"""Many pollers claiming while runs are terminated under them: every task goes
to one poller once, and nobody sees a database conflict (claims take the run
lock before the task row, like every other write)."""

from __future__ import annotations

import asyncio

import grpc

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, schedule, unique

RUNS = 16
ACTIVITIES = 3
POLLERS = 8


async def test_pollers_and_terminations_never_conflict(stub: sg.WorkflowServiceStub) -> None:
    work = unique("work")
    drivers = [Driver(stub) for _ in range(RUNS)]
    for wf in drivers:
        await wf.start()
        task = await wf.poll_decision()
        await wf.decide(task, *[schedule(f"a{i}", "w", work) for i in range(ACTIVITIES)])

    handed: list[tuple[str, int]] = []
    errors: list[grpc.StatusCode] = []

    async def poller(n: int) -> None:
        while True:
            try:
                got = await stub.PollForActivityTask(
                    s.PollForActivityTaskRequest(task_list=work, identity=f"p{n}"), timeout=30
                )
            except grpc.aio.AioRpcError as exc:
                errors.append(exc.code())
                continue
            if not got.task_token:
                return  # the long poll ran dry: everything was handed out or abandoned
            handed.append((got.workflow_execution.run_id, got.scheduled_event_id))
            try:
                await stub.RespondActivityTaskCompleted(
                    s.RespondActivityTaskCompletedRequest(task_token=got.task_token)
                )
            except grpc.aio.AioRpcError as exc:
                # Its run may have been terminated meanwhile; anything else is a failure.
                if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    errors.append(exc.code())

    async def terminator() -> None:
        for wf in drivers[::2]:
            await stub.TerminateWorkflow(
                s.TerminateWorkflowRequest(
                    execution=c.WorkflowExecution(workflow_id=wf.workflow_id), reason="test"
                )
            )
            await asyncio.sleep(0)

    await asyncio.gather(terminator(), *(poller(n) for n in range(POLLERS)))

    assert errors == []
    assert len(handed) == len(set(handed)), "a task was handed out twice"
    for wf in drivers[1::2]:  # never terminated: all of their activities ran
        events = await wf.history()
        assert sum(e.type == "ActivitySuccess" for e in events) == ACTIVITIES
    for wf in drivers:
        ids = [e.event_id for e in await wf.history()]
        assert ids == list(range(1, len(ids) + 1))

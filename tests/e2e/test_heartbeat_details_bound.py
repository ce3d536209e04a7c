"""A run's pending activities may hold heartbeat details up to a bound in all
(`HEARTBEAT_DETAILS_PER_RUN`): each heartbeat is bounded by the payload limit,
but the run's state, details included, is written on every transition, so
without a total one run's workers could make each of its writes hundreds of
megabytes. A heartbeat past the bound is refused and records nothing; one
without details, or once others' details are gone, is taken."""

from __future__ import annotations

import grpc

from orchestrator.engine.limits import HEARTBEAT_DETAILS_PER_RUN
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.e2e.test_bad_input import refused
from tests.helpers import Driver, schedule, unique

DETAILS = c.Payload(data=b"d" * 255_000, encoding="raw")  # (under the 256 KiB payload limit)
FIT = HEARTBEAT_DETAILS_PER_RUN // len(DETAILS.SerializeToString())


async def _describe(
    stub: sg.WorkflowServiceStub, wf: Driver
) -> dict[str, tuple[c.Payload | None, float]]:
    """Each pending activity's last heartbeat: its details, and when (0: none)."""
    resp = await stub.DescribeWorkflow(
        s.DescribeWorkflowRequest(
            namespace=wf.namespace, execution=c.WorkflowExecution(workflow_id=wf.workflow_id)
        )
    )
    return {
        p.activity_id: (
            p.heartbeat_details if p.HasField("heartbeat_details") else None,
            p.last_heartbeat_time.ToNanoseconds() / 1e9,
        )
        for p in resp.pending_activities
    }


async def test_heartbeats_past_the_runs_bound_are_refused_and_change_nothing(
    stub: sg.WorkflowServiceStub,
) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await wf.start()
    ids = [f"a{i}" for i in range(FIT + 1)]
    await wf.decide(await wf.poll_decision(), *(schedule(i, "work", acts) for i in ids))
    tasks = {}
    for _ in ids:
        task = await wf.poll_activity(acts)
        tasks[task.activity_id] = task.task_token

    async def beat(activity_id: str, details: c.Payload | None = DETAILS) -> object:
        request = s.RecordActivityHeartbeatRequest(task_token=tasks[activity_id])
        if details is not None:
            request.details.CopyFrom(details)
        return await stub.RecordActivityHeartbeat(request)

    for activity_id in ids[:FIT]:
        await beat(activity_id)
    before = await _describe(stub, wf)
    assert before[ids[FIT]] == (None, 0)
    history = await wf.history()

    message = await refused(beat(ids[FIT]), grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "heartbeat details" in message and str(HEARTBEAT_DETAILS_PER_RUN) in message
    assert await _describe(stub, wf) == before  # (its details and time, every other's too)
    assert await wf.history() == history

    # A heartbeat without details still counts; details that fit are taken.
    await beat(ids[FIT], details=None)
    details, beaten_at = (await _describe(stub, wf))[ids[FIT]]
    assert details is None and beaten_at > 0
    small = c.Payload(data=b"small", encoding="raw")
    await beat(ids[FIT], small)
    assert (await _describe(stub, wf))[ids[FIT]][0] == small

    # Once another activity's details are gone with it, the large ones fit.
    await wf.finish_activity(s.PollForActivityTaskResponse(task_token=tasks[ids[0]]))
    await beat(ids[FIT])
    assert (await _describe(stub, wf))[ids[FIT]][0] == DETAILS

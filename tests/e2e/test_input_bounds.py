"""Input that only a database column would refuse is refused up front, with
INVALID_ARGUMENT and nothing written; retries of signal-with-start append once."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, dur, payload, schedule, unique


async def _refused(call: object) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    return err.value.details() or ""


async def test_poll_identity_too_long(stub: sg.WorkflowServiceStub) -> None:
    details = await _refused(
        stub.PollForDecisionTask(s.PollForDecisionTaskRequest(task_list="t", identity="i" * 256))
    )
    assert "identity" in details and "255" in details


async def test_nul_in_request_id_and_long_version(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    details = await _refused(wf.start(request_id="a\x00b"))
    assert "request_id" in details and "NUL" in details
    details = await _refused(
        stub.RegisterWorkflowType(
            s.RegisterWorkflowTypeRequest(workflow_type=c.WorkflowType(name="w", version="v" * 256))
        )
    )
    assert "version" in details
    listing = await stub.ListWorkflows(s.ListWorkflowsRequest(workflow_id=wf.workflow_id))
    assert not listing.executions


async def test_durations_and_timestamps_out_of_range(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    huge = Duration(seconds=300_000_000_000)
    details = await _refused(wf.start(execution_timeout=huge))
    assert "execution_timeout" in details and "100 years" in details
    details = await _refused(
        stub.ListWorkflows(s.ListWorkflowsRequest(start_time_from=Timestamp(seconds=-(10**12))))
    )
    assert "start_time_from" in details


async def test_decisions_with_bad_values_change_nothing(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    task = await wf.poll_decision()
    before = await wf.types()
    bad = [
        schedule("a", "work", "t" * 256),
        schedule("a", "work", "tl", heartbeat=0),
        d.Decision(
            start_timer=d.StartTimerDecision(
                timer_id="t", start_to_fire_timeout=Duration(seconds=300_000_000_000)
            )
        ),
        d.Decision(continue_as_new=d.ContinueAsNewDecision(decider_timeout=dur(0))),
    ]
    for decision in bad:
        await _refused(wf.decide(task, decision))
    assert await wf.types() == before
    await wf.decide(task, schedule("a", "work", unique("tl"), heartbeat=5))  # still its task


async def test_signal_with_start_retry_signals_once(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()

    def request() -> s.SignalWithStartWorkflowRequest:
        return s.SignalWithStartWorkflowRequest(
            start=s.StartWorkflowRequest(
                workflow_id=wf.workflow_id,
                workflow_type=c.WorkflowType(name="order"),
                task_list=wf.task_list,
                request_id="retry-me",
            ),
            signal_name="go",
            signal_input=payload(1),
        )

    first = await stub.SignalWithStartWorkflow(request())
    second = await stub.SignalWithStartWorkflow(request())
    assert first.run_id == second.run_id == wf.run_id
    assert (await wf.types()).count("Signal") == 1

"""Hostile input at the edge (issue 15): a JSON payload that is not UTF-8, not
JSON or nested too deep is refused wherever it appears, naming the field, and
appends nothing; ids, durations and page tokens get one rule everywhere."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.e2e.test_bad_input import refused, signal, start_request
from tests.helpers import Driver, payload, schedule, unique

DEPTH = 100  # Limits.payload_depth

BAD_JSON = {
    "not JSON": b'{"order": ',
    "not UTF-8": b'"\xff\xfe"',
    "nested past the limit": b"[" * (DEPTH + 1) + b"]" * (DEPTH + 1),
    "nested past Python's recursion": b"[" * 5000 + b"]" * 5000,
    "NaN": b'{"x": NaN}',
    "Infinity": b"-Infinity",
    "an integer past Python's digit limit": b"9" * 5000,
}


def json_payload(data: bytes) -> c.Payload:
    return c.Payload(data=data, encoding="json")


async def assert_each_refused(
    call: Callable[[c.Payload], Awaitable[object]], field: str, wf: Driver
) -> None:
    """Every bad payload is INVALID_ARGUMENT naming `field`, and the run's history
    is what it was."""
    before = await wf.history()
    for label, data in BAD_JSON.items():
        message = await refused(call(json_payload(data)), grpc.StatusCode.INVALID_ARGUMENT)
        assert field in message, (label, message)
    assert await wf.history() == before


async def test_start_input_must_be_json(stub: sg.WorkflowServiceStub) -> None:
    for label, data in BAD_JSON.items():
        message = await refused(
            stub.StartWorkflow(start_request(input=json_payload(data))),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert "input" in message, label
    assert not (await stub.ListWorkflows(s.ListWorkflowsRequest())).executions


async def test_signal_inputs_must_be_json(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    await assert_each_refused(lambda p: stub.SignalWorkflow(signal(wf, input=p)), "input", wf)
    await assert_each_refused(
        lambda p: stub.SignalWithStartWorkflow(
            s.SignalWithStartWorkflowRequest(
                start=start_request(workflow_id=wf.workflow_id, task_list=wf.task_list),
                signal_name="go",
                signal_input=p,
            )
        ),
        "signal_input",
        wf,
    )
    await assert_each_refused(
        lambda p: stub.TerminateWorkflow(
            s.TerminateWorkflowRequest(
                execution=c.WorkflowExecution(workflow_id=wf.workflow_id), details=p
            )
        ),
        "details",
        wf,
    )


async def test_activity_answers_must_be_json(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await wf.start()
    await wf.decide(await wf.poll_decision(), schedule("A", "work", acts))
    task = await wf.poll_activity(acts)
    token = task.task_token
    await assert_each_refused(
        lambda p: stub.RespondActivityTaskCompleted(
            s.RespondActivityTaskCompletedRequest(task_token=token, result=p)
        ),
        "result",
        wf,
    )
    await assert_each_refused(
        lambda p: stub.RespondActivityTaskFailed(
            s.RespondActivityTaskFailedRequest(task_token=token, reason="x", details=p)
        ),
        "details",
        wf,
    )
    await assert_each_refused(
        lambda p: stub.RecordActivityHeartbeat(
            s.RecordActivityHeartbeatRequest(task_token=token, details=p)
        ),
        "details",
        wf,
    )
    await wf.finish_activity(task, {"fine": True})  # the task itself is still good


async def test_decision_payloads_must_be_json(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    task = await wf.poll_decision()
    token = task.task_token

    def answer(*decisions: d.Decision) -> Awaitable[object]:
        return stub.RespondDecisionTaskCompleted(
            s.RespondDecisionTaskCompletedRequest(task_token=token, decisions=list(decisions))
        )

    def scheduled(p: c.Payload) -> d.Decision:
        decision = schedule("A", "work", "acts")
        decision.schedule_activity.input.CopyFrom(p)
        return decision

    await assert_each_refused(lambda p: answer(scheduled(p)), "decisions[0]", wf)
    await assert_each_refused(
        lambda p: answer(d.Decision(complete_workflow=d.CompleteWorkflowDecision(result=p))),
        "result",
        wf,
    )
    await assert_each_refused(
        lambda p: answer(
            d.Decision(record_marker=d.RecordMarkerDecision(marker_name="m", details=p))
        ),
        "details",
        wf,
    )
    await assert_each_refused(
        lambda p: stub.RespondDecisionTaskFailed(
            s.RespondDecisionTaskFailedRequest(task_token=token, cause="X", details=p)
        ),
        "details",
        wf,
    )
    await wf.decide(task)  # still the current task: the refusals changed nothing


async def test_json_at_the_depth_limit_and_other_encodings_are_accepted(
    stub: sg.WorkflowServiceStub,
) -> None:
    wf = Driver(stub)
    await wf.start()
    deepest = b"[" * DEPTH + b'"ok"' + b"]" * DEPTH
    await stub.SignalWorkflow(signal(wf, input=json_payload(deepest)))
    # Another converter's bytes are its own: only JSON is parsed.
    await stub.SignalWorkflow(signal(wf, input=c.Payload(data=b"\xff\x00{", encoding="binary")))
    # Empty data is "no value", whatever the encoding says.
    await stub.SignalWorkflow(signal(wf, input=c.Payload(data=b"", encoding="json")))
    types = await wf.types()
    assert types.count("Signal") == 3


async def test_a_long_workflow_id_reaches_its_run_on_every_call(
    stub: sg.WorkflowServiceStub,
) -> None:
    """An id start accepts (up to 1,000 characters) can be signalled, read,
    described, canceled and terminated; one character more is refused by all."""
    wf = Driver(stub)
    wf.workflow_id = "w" * 1000
    await wf.start()
    execution = c.WorkflowExecution(workflow_id=wf.workflow_id)
    await stub.SignalWorkflow(signal(wf))
    described = await stub.DescribeWorkflow(s.DescribeWorkflowRequest(execution=execution))
    assert described.info.execution.workflow_id == wf.workflow_id
    await stub.RequestCancelWorkflow(s.RequestCancelWorkflowRequest(execution=execution))
    assert "WorkflowCancelRequested" in await wf.types()
    await stub.TerminateWorkflow(s.TerminateWorkflowRequest(execution=execution, reason="done"))
    assert (await wf.types())[-1] == "WorkflowTerminated"

    too_long = c.WorkflowExecution(workflow_id="w" * 1001)
    calls: list[Awaitable[object]] = [
        stub.StartWorkflow(start_request(workflow_id=too_long.workflow_id)),
        stub.SignalWorkflow(s.SignalWorkflowRequest(execution=too_long, signal_name="go")),
        stub.DescribeWorkflow(s.DescribeWorkflowRequest(execution=too_long)),
        stub.GetWorkflowHistory(s.GetWorkflowHistoryRequest(execution=too_long)),
        stub.RequestCancelWorkflow(s.RequestCancelWorkflowRequest(execution=too_long)),
        stub.TerminateWorkflow(s.TerminateWorkflowRequest(execution=too_long)),
    ]
    for call in calls:
        message = await refused(call, grpc.StatusCode.INVALID_ARGUMENT)
        assert "1000 characters" in message


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [
        (2**62, 0),  # overflowed a timedelta: was UNKNOWN
        (-(2**62), 0),
        (315_576_000_001, 0),
        (10, 1_000_000_000),  # nanos past a second
        (10, -5),  # nanos of the other sign
        (-10, 5),
    ],
)
async def test_malformed_or_huge_durations_are_invalid(
    stub: sg.WorkflowServiceStub, seconds: int, nanos: int
) -> None:
    bad = Duration(seconds=seconds, nanos=nanos)
    message = await refused(
        stub.StartWorkflow(start_request(execution_timeout=bad)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "execution_timeout" in message
    wf = Driver(stub)
    await wf.start()
    task = await wf.poll_decision()
    timer = d.Decision(start_timer=d.StartTimerDecision(timer_id="t", start_to_fire_timeout=bad))
    before = await wf.history()
    await refused(
        stub.RespondDecisionTaskCompleted(
            s.RespondDecisionTaskCompletedRequest(task_token=task.task_token, decisions=[timer])
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert await wf.history() == before


async def test_malformed_timestamps_are_invalid(stub: sg.WorkflowServiceStub) -> None:
    for stamp in (Timestamp(seconds=10, nanos=-1), Timestamp(seconds=10, nanos=10**9)):
        message = await refused(
            stub.ListWorkflows(s.ListWorkflowsRequest(start_time_from=stamp)),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert "start_time_from" in message


@pytest.mark.parametrize(
    "token",
    [
        b"[" * 100_000 + b"]" * 100_000,  # was UNKNOWN (RecursionError)
        b'["' + b"r" * 10_000 + b'", 1, 0]',
        b"\x00\xff" * 10,
        b'{"run": 1}',
    ],
)
async def test_malformed_page_tokens_are_invalid(
    stub: sg.WorkflowServiceStub, token: bytes
) -> None:
    wf = Driver(stub)
    await wf.start()
    execution = c.WorkflowExecution(workflow_id=wf.workflow_id)
    for call in (
        stub.GetWorkflowHistory(
            s.GetWorkflowHistoryRequest(execution=execution, next_page_token=token)
        ),
        stub.ListWorkflows(s.ListWorkflowsRequest(next_page_token=token)),
    ):
        message = await refused(call, grpc.StatusCode.INVALID_ARGUMENT)
        assert "next_page_token" in message


async def test_a_valid_payload_still_round_trips(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    sent = payload({"deep": [[[1]]], "text": "é"})
    await stub.SignalWorkflow(signal(wf, input=sent))
    last = (await wf.history())[-1]
    assert last.type == "Signal"
    assert last.signal.input == sent

"""Bad input through the real gRPC server: every refusal has the right status
code and a message naming the field or limit, and appends nothing."""

from __future__ import annotations

import json
from collections.abc import Awaitable

import grpc
import pytest

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, payload, schedule, unique

PAYLOAD_LIMIT = 256 * 1024


async def refused(call: Awaitable[object], code: grpc.StatusCode) -> str:
    """Await a call that must fail with `code`; return its message."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    return info.value.details() or ""


def big(size: int) -> c.Payload:
    return c.Payload(data=b"x" * size, encoding="raw")


def start_request(**fields: object) -> s.StartWorkflowRequest:
    base: dict[str, object] = {
        "workflow_id": unique("wf"),
        "workflow_type": c.WorkflowType(name="order"),
        "task_list": unique("tl"),
        "input": payload({"order": 1}),
    }
    base.update(fields)
    return s.StartWorkflowRequest(**base)  # type: ignore[arg-type]


async def no_runs(stub: sg.WorkflowServiceStub) -> bool:
    return not (await stub.ListWorkflows(s.ListWorkflowsRequest())).executions


def signal(wf: Driver, name: str = "go", **fields: object) -> s.SignalWorkflowRequest:
    return s.SignalWorkflowRequest(
        execution=c.WorkflowExecution(workflow_id=wf.workflow_id),
        signal_name=name,
        **fields,  # type: ignore[arg-type]
    )


# -- starting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"workflow_id": ""}, "workflow_id"),
        ({"workflow_type": c.WorkflowType()}, "workflow_type.name"),
        ({"workflow_type": c.WorkflowType(version="1")}, "workflow_type.name"),
        ({"task_list": ""}, "task_list"),
        ({"workflow_id": "bad\nid"}, "workflow_id"),
    ],
)
async def test_start_with_a_missing_field_is_invalid(
    stub: sg.WorkflowServiceStub, fields: dict[str, object], named: str
) -> None:
    message = await refused(
        stub.StartWorkflow(start_request(**fields)), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert named in message
    assert await no_runs(stub)


async def test_start_input_over_the_payload_limit(stub: sg.WorkflowServiceStub) -> None:
    message = await refused(
        stub.StartWorkflow(start_request(input=big(PAYLOAD_LIMIT + 1))),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "input" in message
    assert str(PAYLOAD_LIMIT) in message
    assert await no_runs(stub)
    # Exactly at the limit is fine.
    assert (await stub.StartWorkflow(start_request(input=big(PAYLOAD_LIMIT)))).run_id


async def test_signal_input_over_the_payload_limit(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    before = await wf.history()
    message = await refused(
        stub.SignalWorkflow(signal(wf, input=big(PAYLOAD_LIMIT + 1))),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "input" in message
    assert str(PAYLOAD_LIMIT) in message
    assert await wf.history() == before


async def test_start_while_open_is_already_exists_unless_same_request_id(
    stub: sg.WorkflowServiceStub,
) -> None:
    wf = Driver(stub)
    run_id = await wf.start(request_id="req-1")
    before = await wf.history()

    message = await refused(wf.start(request_id="req-2"), grpc.StatusCode.ALREADY_EXISTS)
    assert wf.workflow_id in message
    await refused(wf.start(), grpc.StatusCode.ALREADY_EXISTS)

    # A retry of the same request answers with the run it started.
    assert await wf.start(request_id="req-1") == run_id
    assert await wf.history() == before
    listed = await stub.ListWorkflows(s.ListWorkflowsRequest())
    assert [e.execution.run_id for e in listed.executions] == [run_id]


async def test_signal_request_id_dedupes(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    for _ in range(2):
        await stub.SignalWorkflow(signal(wf, "approved", request_id="sig-1"))
    await stub.SignalWorkflow(signal(wf, "approved", request_id="sig-2"))
    types = await wf.types()
    assert types.count("Signal") == 2
    assert types == ["WorkflowStarted", "DeciderScheduled", "Signal", "Signal"]


# -- unknown and closed runs ---------------------------------------------------------------


async def test_unknown_workflow_is_not_found(stub: sg.WorkflowServiceStub) -> None:
    missing = c.WorkflowExecution(workflow_id=unique("nope"))
    calls: list[Awaitable[object]] = [
        stub.DescribeWorkflow(s.DescribeWorkflowRequest(execution=missing)),
        stub.GetWorkflowHistory(s.GetWorkflowHistoryRequest(execution=missing)),
        stub.SignalWorkflow(s.SignalWorkflowRequest(execution=missing, signal_name="go")),
        stub.RequestCancelWorkflow(s.RequestCancelWorkflowRequest(execution=missing)),
        stub.TerminateWorkflow(s.TerminateWorkflowRequest(execution=missing)),
    ]
    for call in calls:
        message = await refused(call, grpc.StatusCode.NOT_FOUND)
        assert missing.workflow_id in message
    assert await no_runs(stub)

    # A known workflow with an unknown run id is NOT_FOUND too.
    wf = Driver(stub)
    await wf.start()
    wrong_run = c.WorkflowExecution(workflow_id=wf.workflow_id, run_id=unique("run"))
    await refused(
        stub.DescribeWorkflow(s.DescribeWorkflowRequest(execution=wrong_run)),
        grpc.StatusCode.NOT_FOUND,
    )
    await refused(
        stub.SignalWorkflow(s.SignalWorkflowRequest(execution=wrong_run, signal_name="go")),
        grpc.StatusCode.NOT_FOUND,
    )
    assert await wf.types() == ["WorkflowStarted", "DeciderScheduled"]


async def test_closed_run_refuses_signal_cancel_terminate(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    await wf.decide(await wf.poll_decision(), complete("done"))
    before = await wf.history()
    assert before[-1].type == "WorkflowSuccess"

    for execution in (
        c.WorkflowExecution(workflow_id=wf.workflow_id),
        c.WorkflowExecution(workflow_id=wf.workflow_id, run_id=wf.run_id),
    ):
        message = await refused(
            stub.SignalWorkflow(s.SignalWorkflowRequest(execution=execution, signal_name="go")),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        assert "closed" in message
        await refused(
            stub.TerminateWorkflow(s.TerminateWorkflowRequest(execution=execution, reason="x")),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        await refused(
            stub.RequestCancelWorkflow(s.RequestCancelWorkflowRequest(execution=execution)),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
    assert await wf.history() == before


# -- task tokens ------------------------------------------------------------------------------


async def test_forged_truncated_and_empty_tokens_are_invalid(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await wf.start()
    await wf.decide(await wf.poll_decision(), schedule("A", "work", acts))
    activity = await wf.poll_activity(acts)
    await stub.SignalWorkflow(signal(wf))
    decision = await wf.poll_decision()
    before = await wf.history()

    def altered(token: bytes) -> bytes:
        # Same shape, one field changed: the signature no longer matches.
        body = json.loads(token[17:])
        body[4] += 1  # the scheduled event id
        return token[:17] + json.dumps(body, separators=(",", ":")).encode()

    bad_tokens = {
        "empty": b"",
        "truncated": decision.task_token[:-3],
        "signature only": decision.task_token[:17],
        "one byte": decision.task_token[:1],
        "altered": altered(decision.task_token),
        "garbage": b"\x01" + b"\x00" * 40,
        "wrong version": b"\x02" + decision.task_token[1:],
    }
    for label, token in bad_tokens.items():
        message = await refused(
            stub.RespondDecisionTaskCompleted(
                s.RespondDecisionTaskCompletedRequest(task_token=token, decisions=[complete()])
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        assert "task_token" in message, label
    for label, token in {"empty": b"", "altered": altered(activity.task_token)}.items():
        for call in (
            stub.RespondActivityTaskCompleted(
                s.RespondActivityTaskCompletedRequest(task_token=token, result=payload(1))
            ),
            stub.RecordActivityHeartbeat(s.RecordActivityHeartbeatRequest(task_token=token)),
            stub.RespondDecisionTaskFailed(s.RespondDecisionTaskFailedRequest(task_token=token)),
        ):
            message = await refused(call, grpc.StatusCode.INVALID_ARGUMENT)
            assert "task_token" in message, label
    assert await wf.history() == before

    # The genuine tokens still work.
    await wf.finish_activity(activity)
    await wf.decide(decision)


async def test_token_of_the_wrong_kind_is_invalid(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await wf.start()
    await wf.decide(await wf.poll_decision(), schedule("A", "work", acts))
    activity = await wf.poll_activity(acts)
    await stub.SignalWorkflow(signal(wf))
    decision = await wf.poll_decision()
    before = await wf.history()

    message = await refused(
        stub.RespondDecisionTaskCompleted(
            s.RespondDecisionTaskCompletedRequest(
                task_token=activity.task_token, decisions=[complete()]
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "task_token" in message
    assert "activity" in message
    message = await refused(
        stub.RespondActivityTaskCompleted(
            s.RespondActivityTaskCompletedRequest(task_token=decision.task_token)
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "task_token" in message
    assert "decision" in message
    assert await wf.history() == before


async def test_replayed_decision_token_is_not_found(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    task = await wf.poll_decision()
    marker = d.Decision(record_marker=d.RecordMarkerDecision(marker_name="m"))
    await wf.decide(task, marker)
    before = await wf.history()

    message = await refused(wf.decide(task, marker), grpc.StatusCode.NOT_FOUND)
    assert "decision task" in message
    await refused(
        stub.RespondDecisionTaskFailed(
            s.RespondDecisionTaskFailedRequest(task_token=task.task_token)
        ),
        grpc.StatusCode.NOT_FOUND,
    )
    assert await wf.history() == before


async def test_replayed_activity_token_is_not_found(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await wf.start()
    await wf.decide(await wf.poll_decision(), schedule("A", "work", acts))
    activity = await wf.poll_activity(acts)
    await wf.finish_activity(activity)
    before = await wf.history()
    await refused(wf.finish_activity(activity), grpc.StatusCode.NOT_FOUND)
    await refused(
        stub.RespondActivityTaskFailed(
            s.RespondActivityTaskFailedRequest(task_token=activity.task_token, reason="x")
        ),
        grpc.StatusCode.NOT_FOUND,
    )
    assert await wf.history() == before


# -- decisions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decisions", "named"),
    [
        ([complete("early"), schedule("A", "work", "acts")], "close decision must be the last"),
        ([d.Decision()], "no decision attributes"),
        ([schedule("A", "work", "acts"), d.Decision()], "decision 1"),
        ([d.Decision(start_timer=d.StartTimerDecision(timer_id="t"))], "start_to_fire_timeout"),
        ([schedule("", "work", "acts")], "activity_id"),
    ],
)
async def test_invalid_decisions_append_nothing(
    stub: sg.WorkflowServiceStub, decisions: list[d.Decision], named: str
) -> None:
    wf = Driver(stub)
    await wf.start()
    task = await wf.poll_decision()
    before = await wf.history()

    message = await refused(wf.decide(task, *decisions), grpc.StatusCode.INVALID_ARGUMENT)
    assert named in message
    assert await wf.history() == before

    # Nothing happened: the same task can still be answered properly.
    await wf.decide(task, complete("done"))
    assert (await wf.types())[-2:] == ["DeciderCompleted", "WorkflowSuccess"]


async def test_decision_payload_over_the_limit(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    task = await wf.poll_decision()
    before = await wf.history()
    too_big = d.Decision(
        complete_workflow=d.CompleteWorkflowDecision(result=big(PAYLOAD_LIMIT + 1))
    )
    message = await refused(wf.decide(task, too_big), grpc.StatusCode.INVALID_ARGUMENT)
    assert str(PAYLOAD_LIMIT) in message
    assert await wf.history() == before


# -- page tokens ---------------------------------------------------------------------------------


MALFORMED_PAGE_TOKENS = [
    b"not json",
    b"\xff\xfe\x00",
    b"{}",
    b"[]",
    b'"a string"',
    b"[1,2,3,4,5]",
]


@pytest.mark.parametrize("token", MALFORMED_PAGE_TOKENS)
async def test_malformed_history_page_token(stub: sg.WorkflowServiceStub, token: bytes) -> None:
    wf = Driver(stub)
    await wf.start()
    message = await refused(
        stub.GetWorkflowHistory(
            s.GetWorkflowHistoryRequest(
                execution=c.WorkflowExecution(workflow_id=wf.workflow_id), next_page_token=token
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "next_page_token" in message


@pytest.mark.parametrize("token", MALFORMED_PAGE_TOKENS)
async def test_malformed_list_page_token(stub: sg.WorkflowServiceStub, token: bytes) -> None:
    message = await refused(
        stub.ListWorkflows(s.ListWorkflowsRequest(next_page_token=token)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "next_page_token" in message


@pytest.mark.parametrize("fields", ['RUN, "one", 0', "RUN, null, null", "RUN, 1.5, []", "1, 2, 3"])
async def test_history_page_token_with_wrong_field_types(
    stub: sg.WorkflowServiceStub, fields: str
) -> None:
    """Page tokens are plain JSON lists: one of the right length but with fields of
    the wrong type is just as malformed, and must be INVALID_ARGUMENT too, not an
    internal or database error."""
    wf = Driver(stub)
    run_id = await wf.start()
    token = f"[{fields}]".replace("RUN", json.dumps(run_id)).encode()
    message = await refused(
        stub.GetWorkflowHistory(
            s.GetWorkflowHistoryRequest(
                execution=c.WorkflowExecution(workflow_id=wf.workflow_id), next_page_token=token
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "next_page_token" in message


@pytest.mark.parametrize("token", [b'["yesterday", "run"]', b"[1, 2]", b"[null, null]"])
async def test_list_page_token_with_wrong_field_types(
    stub: sg.WorkflowServiceStub, token: bytes
) -> None:
    """The same for ListWorkflows: a token that is a JSON pair but not (time, run id)."""
    message = await refused(
        stub.ListWorkflows(s.ListWorkflowsRequest(next_page_token=token)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "next_page_token" in message

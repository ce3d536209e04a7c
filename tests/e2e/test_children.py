"""Workflows that talk to workflows, through the real gRPC server on both
databases: a child started by a decision, each way a child can end reported to
its parent, a child that continues as new followed to its end, each parent close
policy, and signals to other workflows."""

from __future__ import annotations

import grpc
import pytest

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, dur, payload, unique, wait_until

POLICY = {
    "terminate": d.PARENT_CLOSE_POLICY_TERMINATE,
    "request_cancel": d.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
    "abandon": d.PARENT_CLOSE_POLICY_ABANDON,
}


def start_child(
    workflow_id: str, task_list: str, policy: str = "terminate", **fields: object
) -> d.Decision:
    return d.Decision(
        start_child_workflow=d.StartChildWorkflowDecision(
            workflow_id=workflow_id,
            workflow_type=c.WorkflowType(name="sub-order"),
            task_list=task_list,
            input=payload({"child": workflow_id}),
            parent_close_policy=POLICY[policy],
            **fields,
        )
    )


def signal_to(workflow_id: str, name: str, value: object = None) -> d.Decision:
    return d.Decision(
        signal_external_workflow=d.SignalExternalWorkflowDecision(
            execution=c.WorkflowExecution(workflow_id=workflow_id),
            signal_name=name,
            input=payload(value),
        )
    )


async def ask(wf: Driver, *decisions: d.Decision) -> None:
    task = await wf.poll_decision()
    await wf.decide(task, *decisions)


async def last(wf: Driver, type_name: str) -> h.HistoryEvent:
    found = [e for e in await wf.history() if e.type == type_name]
    assert found, f"no {type_name} in {await wf.types()}"
    return found[-1]


async def with_child(
    stub: sg.WorkflowServiceStub, policy: str = "terminate"
) -> tuple[Driver, Driver]:
    parent = Driver(stub)
    await parent.start()
    child = Driver(stub)
    await ask(parent, start_child(child.workflow_id, child.task_list, policy))
    started = (await last(parent, "ChildWorkflowStarted")).child_workflow_started
    child.run_id = started.run_id
    return parent, child


async def status(stub: sg.WorkflowServiceStub, workflow_id: str) -> str:
    resp = await stub.DescribeWorkflow(
        s.DescribeWorkflowRequest(execution=c.WorkflowExecution(workflow_id=workflow_id))
    )
    return c.WorkflowStatus.Name(resp.info.status).removeprefix("WORKFLOW_STATUS_").lower()


async def test_a_child_starts_in_the_decisions_transaction(stub: sg.WorkflowServiceStub) -> None:
    parent, child = await with_child(stub)
    # Not a trigger: the parent waits quietly for its child.
    assert (await parent.types())[-2:] == ["DeciderCompleted", "ChildWorkflowStarted"]
    started = (await last(parent, "ChildWorkflowStarted")).child_workflow_started
    assert (started.workflow_id, started.workflow_type.name) == (child.workflow_id, "sub-order")
    assert started.parent_close_policy == "terminate"

    first = (await child.history())[0].workflow_started
    assert (first.parent_workflow_id, first.parent_run_id) == (parent.workflow_id, parent.run_id)
    assert first.parent_started_event_id == (await last(parent, "ChildWorkflowStarted")).event_id
    assert first.task_list == child.task_list
    assert (await child.types()) == ["WorkflowStarted", "DeciderScheduled"]
    assert (await child.poll_decision()).task_token  # on its own task list


@pytest.mark.parametrize("outcome", ["success", "failed", "canceled", "terminated", "timed_out"])
async def test_each_way_a_child_ends_is_reported_to_its_parent(
    stub: sg.WorkflowServiceStub, outcome: str
) -> None:
    parent = Driver(stub)
    await parent.start()
    child = Driver(stub)
    extra = {"execution_timeout": dur(1)} if outcome == "timed_out" else {}
    await ask(parent, start_child(child.workflow_id, child.task_list, **extra))
    child.run_id = (await last(parent, "ChildWorkflowStarted")).child_workflow_started.run_id
    execution = c.WorkflowExecution(workflow_id=child.workflow_id)
    if outcome == "success":
        await ask(child, complete({"shipped": True}))
    elif outcome == "failed":
        await ask(child, d.Decision(fail_workflow=d.FailWorkflowDecision(reason="no stock")))
    elif outcome == "canceled":
        await stub.RequestCancelWorkflow(s.RequestCancelWorkflowRequest(execution=execution))
        task = await child.poll_decision()  # the first task already saw the request
        await child.decide(task, d.Decision(cancel_workflow=d.CancelWorkflowDecision()))
    elif outcome == "terminated":
        await stub.TerminateWorkflow(
            s.TerminateWorkflowRequest(execution=execution, reason="by hand")
        )

    event_type = {
        "success": "ChildWorkflowSuccess",
        "failed": "ChildWorkflowFailed",
        "canceled": "ChildWorkflowCanceled",
        "terminated": "ChildWorkflowTerminated",
        "timed_out": "ChildWorkflowTimedOut",
    }[outcome]

    async def reported() -> bool:
        return event_type in await parent.types()

    await wait_until(reported, timeout=20)
    event = await last(parent, event_type)
    attrs = getattr(event, event.WhichOneof("attributes"))
    assert (attrs.workflow_id, attrs.run_id) == (child.workflow_id, child.run_id)
    started = await last(parent, "ChildWorkflowStarted")
    assert attrs.started_event_id == started.event_id
    if outcome == "success":
        assert attrs.result.data == b'{"shipped": true}'
    if outcome == "failed":
        assert attrs.reason == "no stock"
    if outcome == "terminated":
        assert attrs.reason == "by hand"
    assert (await parent.types())[-1] == "DeciderScheduled"  # a trigger


async def test_a_child_that_continues_as_new_is_followed_to_its_end(
    stub: sg.WorkflowServiceStub,
) -> None:
    parent, child = await with_child(stub)
    await ask(child, d.Decision(continue_as_new=d.ContinueAsNewDecision()))
    assert "ChildWorkflowSuccess" not in await parent.types()
    first_run = child.run_id
    child.run_id = ""
    await ask(child, complete("second run done"))
    done = (await last(parent, "ChildWorkflowSuccess")).child_workflow_success
    assert done.run_id != first_run
    assert done.result.data == b'"second run done"'


async def test_a_taken_child_id_is_refused(stub: sg.WorkflowServiceStub) -> None:
    busy = Driver(stub)
    await busy.start()  # an open run of the id the parent asks for
    parent = Driver(stub)
    await parent.start()
    fresh = unique("child")
    await ask(
        parent,
        start_child(busy.workflow_id, unique("tl")),
        start_child(fresh, unique("tl")),
        start_child(fresh, unique("tl")),
        start_child(parent.workflow_id, unique("tl")),
    )
    causes = [
        (e.start_child_workflow_failed.workflow_id, e.start_child_workflow_failed.cause)
        for e in await parent.history()
        if e.type == "StartChildWorkflowFailed"
    ]
    assert causes == [
        (busy.workflow_id, "WORKFLOW_ALREADY_RUNNING"),
        (fresh, "CHILD_ID_ALREADY_IN_USE"),
        (parent.workflow_id, "WORKFLOW_ALREADY_RUNNING"),
    ]
    assert (await parent.types())[-1] == "DeciderScheduled"
    assert await status(stub, fresh) == "open"


@pytest.mark.parametrize("policy", ["terminate", "request_cancel", "abandon"])
async def test_parent_close_policies(stub: sg.WorkflowServiceStub, policy: str) -> None:
    parent, child = await with_child(stub, policy)
    await stub.SignalWorkflow(  # a decision task for the parent to close in
        s.SignalWorkflowRequest(
            execution=c.WorkflowExecution(workflow_id=parent.workflow_id), signal_name="close"
        )
    )
    await ask(parent, complete("parent done"))
    child_types = await child.types()
    if policy == "terminate":
        assert child_types[-1] == "WorkflowTerminated"
        reason = (await last(child, "WorkflowTerminated")).workflow_terminated.reason
        assert parent.workflow_id in reason
    elif policy == "request_cancel":
        assert "WorkflowCancelRequested" in child_types
        assert await status(stub, child.workflow_id) == "open"
    else:
        assert child_types == ["WorkflowStarted", "DeciderScheduled"]
        assert await status(stub, child.workflow_id) == "open"
    # The parent closed first: it hears nothing of the child's end.
    assert (await parent.types())[-1] == "WorkflowSuccess"


async def test_a_terminated_parent_takes_its_children_with_it(stub: sg.WorkflowServiceStub) -> None:
    parent, child = await with_child(stub)
    await stub.TerminateWorkflow(
        s.TerminateWorkflowRequest(execution=c.WorkflowExecution(workflow_id=parent.workflow_id))
    )
    assert (await child.types())[-1] == "WorkflowTerminated"


async def test_signals_reach_other_workflows(stub: sg.WorkflowServiceStub) -> None:
    sender, receiver = Driver(stub), Driver(stub)
    await sender.start()
    await receiver.start()
    nobody = unique("nobody")
    await ask(
        sender, signal_to(receiver.workflow_id, "approved", {"by": "ann"}), signal_to(nobody, "x")
    )

    sig = (await last(receiver, "Signal")).signal
    assert (sig.signal_name, sig.input.data) == ("approved", b'{"by": "ann"}')
    assert sig.identity == f"workflow:{sender.workflow_id}"
    sent = (await last(sender, "ExternalWorkflowSignaled")).external_workflow_signaled
    assert (sent.workflow_id, sent.run_id) == (receiver.workflow_id, receiver.run_id)
    failed = (await last(sender, "SignalExternalWorkflowFailed")).signal_external_workflow_failed
    assert (failed.workflow_id, failed.cause) == (nobody, "UNKNOWN_EXTERNAL_WORKFLOW")

    # A closed run is not reached either.
    await ask(receiver, complete())
    await ask(sender, signal_to(receiver.workflow_id, "late"))
    causes = [
        e.signal_external_workflow_failed.cause
        for e in await sender.history()
        if e.type == "SignalExternalWorkflowFailed"
    ]
    assert causes == ["UNKNOWN_EXTERNAL_WORKFLOW", "UNKNOWN_EXTERNAL_WORKFLOW"]


async def test_bad_child_and_signal_decisions_change_nothing(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    task = await wf.poll_decision()
    before = await wf.types()
    bad = [
        start_child("", "tl"),
        d.Decision(start_child_workflow=d.StartChildWorkflowDecision(workflow_id="x")),
        signal_to("", "x"),
        signal_to("someone", ""),
        start_child("kid", "tl", execution_timeout=dur(-5)),
    ]
    for decision in bad:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await wf.decide(task, decision)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await wf.types() == before


async def test_a_child_started_in_the_closing_answer_gets_its_policy(
    stub: sg.WorkflowServiceStub,
) -> None:
    parent = Driver(stub)
    await parent.start()
    child = Driver(stub)
    await ask(parent, start_child(child.workflow_id, child.task_list), complete("bye"))
    assert (await parent.types())[-1] == "WorkflowSuccess"
    assert (await child.types())[-1] == "WorkflowTerminated"


async def test_a_signal_to_itself_lands_before_the_close(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    await ask(wf, signal_to(wf.workflow_id, "note", {"n": 1}), complete())
    types = await wf.types()
    assert types[-4:] == [
        "DeciderCompleted",
        "ExternalWorkflowSignaled",
        "Signal",
        "WorkflowSuccess",
    ]

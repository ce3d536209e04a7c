"""The WorkflowService API end to end through the real gRPC server:
signal-with-start, cancel, terminate, continue-as-new, registered defaults, task
lists, health. Polls, history, describe and list are in test_api.py."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orchestrator.config import ServerConfig
from orchestrator.server import Server
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.e2e.api_calls import describe, execution, refused, task_list, timer
from tests.helpers import Driver, complete, dur, payload, schedule, unique

# -- signal-with-start, cancel, terminate, continue-as-new ---------------------------------


async def test_signal_with_start(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)

    def request(value: int) -> s.SignalWithStartWorkflowRequest:
        return s.SignalWithStartWorkflowRequest(
            start=s.StartWorkflowRequest(
                workflow_id=wf.workflow_id,
                workflow_type=c.WorkflowType(name="order"),
                task_list=wf.task_list,
                input=payload({"order": value}),
                identity="ops",
            ),
            signal_name="add",
            signal_input=payload(value),
        )

    first = await stub.SignalWithStartWorkflow(request(1))
    assert first.started
    wf.run_id = first.run_id
    events = await wf.history()
    assert [e.type for e in events] == ["WorkflowStarted", "Signal", "DeciderScheduled"]
    assert events[1].signal.signal_name == "add"
    assert events[1].signal.input == payload(1)

    second = await stub.SignalWithStartWorkflow(request(2))
    assert not second.started
    assert second.run_id == first.run_id
    events = await wf.history()
    assert [e.type for e in events] == ["WorkflowStarted", "Signal", "DeciderScheduled", "Signal"]
    assert events[3].signal.input == payload(2)
    assert events[0].workflow_started.input == payload({"order": 1})

    # Once the run is closed, signal-with-start opens a new run.
    await wf.decide(await wf.poll_decision(), complete("done"))
    third = await stub.SignalWithStartWorkflow(request(3))
    assert third.started
    assert third.run_id != first.run_id
    wf.run_id = third.run_id
    assert await wf.types() == ["WorkflowStarted", "Signal", "DeciderScheduled"]


async def test_request_cancel_then_decider_cancels(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    await wf.decide(await wf.poll_decision())  # nothing to do yet

    await stub.RequestCancelWorkflow(
        s.RequestCancelWorkflowRequest(
            execution=execution(wf), reason="no longer needed", identity="ops", request_id="c1"
        )
    )
    # Asking again (same request, or a new one) changes nothing.
    await stub.RequestCancelWorkflow(
        s.RequestCancelWorkflowRequest(execution=execution(wf), request_id="c1")
    )
    await stub.RequestCancelWorkflow(s.RequestCancelWorkflowRequest(execution=execution(wf)))
    events = await wf.history()
    assert [e.type for e in events][-2:] == ["WorkflowCancelRequested", "DeciderScheduled"]
    assert [e.type for e in events].count("WorkflowCancelRequested") == 1
    requested = events[-2].workflow_cancel_requested
    assert (requested.reason, requested.identity) == ("no longer needed", "ops")
    assert (await describe(wf)).cancel_requested

    task = await wf.poll_decision()
    assert "WorkflowCancelRequested" in [e.type for e in task.events]
    await wf.decide(
        task, d.Decision(cancel_workflow=d.CancelWorkflowDecision(details=payload("bye")))
    )
    events = await wf.history()
    assert events[-1].type == "WorkflowCanceled"
    assert events[-1].workflow_canceled.details == payload("bye")
    assert (await describe(wf)).info.status == c.WORKFLOW_STATUS_CANCELED


async def test_terminate_with_pending_activity(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await wf.start()
    await wf.decide(await wf.poll_decision(), schedule("A", "work", acts), timer("t", 3600))
    activity = await wf.poll_activity(acts)

    await stub.TerminateWorkflow(
        s.TerminateWorkflowRequest(
            execution=execution(wf), reason="operator", details=payload("why"), identity="ops"
        )
    )
    events = await wf.history()
    assert events[-1].type == "WorkflowTerminated"
    attrs = events[-1].workflow_terminated
    assert (attrs.reason, attrs.identity, attrs.details) == ("operator", "ops", payload("why"))
    described = await describe(wf)
    assert described.info.status == c.WORKFLOW_STATUS_TERMINATED
    assert not described.pending_activities
    assert not described.pending_timers

    message = await refused(wf.finish_activity(activity), grpc.StatusCode.FAILED_PRECONDITION)
    assert "closed" in message
    await refused(
        stub.RecordActivityHeartbeat(
            s.RecordActivityHeartbeatRequest(task_token=activity.task_token)
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert await wf.history() == events


async def test_continue_as_new(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    old_run = await wf.start(execution_timeout=dur(3600), decider_timeout=dur(20))
    task = await wf.poll_decision()
    await wf.decide(
        task,
        d.Decision(continue_as_new=d.ContinueAsNewDecision(input=payload({"page": 2}))),
    )

    old_events = await wf.history()
    closing = old_events[-1]
    assert closing.type == "WorkflowContinuedAsNew"
    new_run = closing.workflow_continued_as_new.new_run_id
    assert new_run
    assert new_run != old_run
    assert closing.workflow_continued_as_new.task_list == wf.task_list
    assert (await describe(wf, old_run)).info.status == c.WORKFLOW_STATUS_CONTINUED_AS_NEW

    # Without a run id, the workflow id now means the new, open run.
    current = await describe(wf)
    assert current.info.execution.run_id == new_run
    assert current.info.status == c.WORKFLOW_STATUS_OPEN
    assert current.info.continued_from_run_id == old_run
    assert current.execution_timeout == dur(3600)
    assert current.decider_timeout == dur(20)

    wf.run_id = new_run
    events = await wf.history()
    assert [e.type for e in events] == ["WorkflowStarted", "DeciderScheduled"]
    started = events[0].workflow_started
    assert started.continued_from_run_id == old_run
    assert started.input == payload({"page": 2})
    assert started.workflow_type.name == "order"

    task = await wf.poll_decision()
    assert task.workflow_execution == execution(wf, new_run)
    assert task.started_event_id == 3
    assert task.previous_started_event_id == 0
    await wf.decide(task, complete("done"))
    assert (await wf.types())[-1] == "WorkflowSuccess"


# -- registrations and task lists ---------------------------------------------------------------


async def test_registered_activity_defaults_apply(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await stub.RegisterActivityType(
        s.RegisterActivityTypeRequest(
            activity_type=c.ActivityType(name="resize", version="2"),
            default_task_list=acts,
            default_schedule_to_start_timeout=dur(60),
            default_start_to_close_timeout=dur(45),
            default_schedule_to_close_timeout=dur(120),
            default_heartbeat_timeout=dur(15),
        )
    )
    await wf.start()
    bare = d.ScheduleActivityDecision(
        activity_id="A", activity_type=c.ActivityType(name="resize", version="2")
    )
    overridden = d.ScheduleActivityDecision(
        activity_id="B",
        activity_type=c.ActivityType(name="resize", version="2"),
        task_list=wf.task_list,
        start_to_close_timeout=dur(5),
    )
    unregistered = d.ScheduleActivityDecision(
        activity_id="C", activity_type=c.ActivityType(name="resize", version="9")
    )
    await wf.decide(
        await wf.poll_decision(),
        d.Decision(schedule_activity=bare),
        d.Decision(schedule_activity=overridden),
        d.Decision(schedule_activity=unregistered),
    )
    scheduled = {
        e.activity_scheduled.activity_id: e.activity_scheduled
        for e in await wf.history()
        if e.type == "ActivityScheduled"
    }
    a = scheduled["A"]
    assert a.task_list == acts
    assert a.schedule_to_start_timeout == dur(60)
    assert a.start_to_close_timeout == dur(45)
    assert a.schedule_to_close_timeout == dur(120)
    assert a.heartbeat_timeout == dur(15)

    b = scheduled["B"]  # the decision's own values win; the rest still default
    assert b.task_list == wf.task_list
    assert b.start_to_close_timeout == dur(5)
    assert b.heartbeat_timeout == dur(15)

    c_ = scheduled["C"]  # another version: the workflow's task list, CONTRACT.md defaults
    assert c_.task_list == wf.task_list
    assert c_.start_to_close_timeout == dur(300)
    assert not c_.HasField("schedule_to_start_timeout")
    assert not c_.HasField("heartbeat_timeout")

    task = await wf.poll_activity(acts)
    assert task.activity_id == "A"
    assert task.start_to_close_timeout == dur(45)
    assert task.heartbeat_timeout == dur(15)


async def test_registered_workflow_defaults_apply(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await stub.RegisterWorkflowType(
        s.RegisterWorkflowTypeRequest(
            workflow_type=c.WorkflowType(name="billing"),
            default_task_list=wf.task_list,
            default_execution_timeout=dur(7200),
            default_decider_timeout=dur(30),
        )
    )
    resp = await stub.StartWorkflow(
        s.StartWorkflowRequest(
            workflow_id=wf.workflow_id, workflow_type=c.WorkflowType(name="billing")
        )
    )
    wf.run_id = resp.run_id
    started = (await wf.history())[0].workflow_started
    assert started.task_list == wf.task_list
    assert started.execution_timeout == dur(7200)
    assert started.decider_timeout == dur(30)
    assert (await wf.poll_decision()).workflow_execution.run_id == resp.run_id


async def test_describe_task_list(stub: sg.WorkflowServiceStub) -> None:
    tl = unique("tl")
    runs = []
    for _ in range(3):
        wf = Driver(stub)
        wf.task_list = tl
        await wf.start()
        runs.append(wf)
    described = await task_list(stub, tl)
    assert described.backlog == 3
    assert not described.pollers
    activities = await task_list(stub, tl, c.TASK_LIST_KIND_ACTIVITY)
    assert activities.backlog == 0

    task = await runs[0].poll_decision()
    assert task.workflow_execution.workflow_id == runs[0].workflow_id  # oldest first
    described = await task_list(stub, tl)
    assert described.backlog == 2
    assert [p.identity for p in described.pollers] == ["decider-1"]
    assert described.pollers[0].HasField("last_access_time")

    message = await refused(
        stub.DescribeTaskList(s.DescribeTaskListRequest(task_list=tl)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert "kind" in message


async def test_health_check_serving(server: Server) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "weft.v1.WorkflowService"):
            resp = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("serve", [True, False])
async def test_health_says_serving_only_after_before_serving_allows_it(
    server_config: ServerConfig, serve: bool
) -> None:
    """`Server.start(before_serving=…)` (the embedded workers' registrations):
    NOT_SERVING while it runs, though the port answers and the node's services
    answer in process; SERVING afterwards only if it returned True."""
    node = Server(server_config)
    entered, release = asyncio.Event(), asyncio.Event()

    async def before_serving() -> bool:
        await node.in_process().workflow.ListTaskLists(s.ListTaskListsRequest(), timeout=5)
        entered.set()
        await release.wait()
        return serve

    starting = asyncio.ensure_future(node.start(before_serving=before_serving))
    try:
        await asyncio.wait_for(entered.wait(), 30)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            check = health_pb2.HealthCheckRequest(service="")
            assert (await health.Check(check)).status == health_pb2.HealthCheckResponse.NOT_SERVING
            release.set()
            await starting
            expected = (
                health_pb2.HealthCheckResponse.SERVING
                if serve
                else health_pb2.HealthCheckResponse.NOT_SERVING
            )
            assert (await health.Check(check)).status == expected
    finally:
        release.set()
        await starting
        await node.stop(grace=0.5)

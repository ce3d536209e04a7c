"""The WorkflowService API end to end through the real gRPC server: polls and
their matching, history following and paging, describe, list, signal-with-start,
cancel, terminate, continue-as-new, registered defaults, task lists, health."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orchestrator.server import Server
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, dur, payload, schedule, unique, wait_until


async def refused(call: Awaitable[object], code: grpc.StatusCode) -> str:
    """Await a call that must fail with `code`; return its message."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    return info.value.details() or ""


def execution(wf: Driver, run_id: str = "") -> c.WorkflowExecution:
    return c.WorkflowExecution(workflow_id=wf.workflow_id, run_id=run_id)


async def describe(wf: Driver, run_id: str = "") -> s.DescribeWorkflowResponse:
    return await wf.stub.DescribeWorkflow(
        s.DescribeWorkflowRequest(execution=execution(wf, run_id))
    )


async def signal(wf: Driver, name: str = "go") -> None:
    await wf.stub.SignalWorkflow(
        s.SignalWorkflowRequest(execution=execution(wf), signal_name=name, identity="ops")
    )


async def task_list(
    stub: sg.WorkflowServiceStub, name: str, kind: c.TaskListKind = c.TASK_LIST_KIND_DECISION
) -> s.DescribeTaskListResponse:
    return await stub.DescribeTaskList(s.DescribeTaskListRequest(task_list=name, kind=kind))


def timer(timer_id: str, seconds: float) -> d.Decision:
    return d.Decision(
        start_timer=d.StartTimerDecision(timer_id=timer_id, start_to_fire_timeout=dur(seconds))
    )


# -- polls ------------------------------------------------------------------------------


async def test_two_concurrent_deciders_one_gets_the_task(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()

    def poll(identity: str) -> Awaitable[s.PollForDecisionTaskResponse]:
        return stub.PollForDecisionTask(
            s.PollForDecisionTaskRequest(task_list=wf.task_list, identity=identity)
        )

    first, second = await asyncio.gather(poll("decider-a"), poll("decider-b"))
    got = [r for r in (first, second) if r.task_token]
    empty = [r for r in (first, second) if not r.task_token]
    assert len(got) == 1
    assert len(empty) == 1
    assert not empty[0].events
    assert got[0].workflow_execution.run_id == wf.run_id
    assert got[0].started_event_id == 3

    events = await wf.history()
    assert [e.type for e in events] == ["WorkflowStarted", "DeciderScheduled", "DeciderStarted"]
    winner = "decider-a" if first.task_token else "decider-b"
    assert events[2].decider_started.identity == winner


async def test_waiting_poll_is_answered_by_a_new_task(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    poll = asyncio.create_task(wf.poll_decision())

    async def polling() -> bool:
        pollers = (await task_list(stub, wf.task_list)).pollers
        return any(p.identity == "decider-1" for p in pollers)

    await wait_until(polling)
    assert not poll.done()
    run_id = await wf.start()

    task = await poll
    assert task.task_token
    assert task.workflow_execution == execution(wf, run_id)
    assert task.workflow_type.name == "order"
    assert [e.type for e in task.events] == [
        "WorkflowStarted",
        "DeciderScheduled",
        "DeciderStarted",
    ]
    assert task.events[0].workflow_started.input == payload({"order": 1})


async def test_activity_poll_is_answered_by_a_new_task(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await wf.start()
    decision = await wf.poll_decision()
    poll = asyncio.create_task(wf.poll_activity(acts))

    async def polling() -> bool:
        pollers = (await task_list(stub, acts, c.TASK_LIST_KIND_ACTIVITY)).pollers
        return any(p.identity == "runner-1" for p in pollers)

    await wait_until(polling)
    await wf.decide(decision, schedule("A", "work", acts, heartbeat=30))
    task = await poll
    assert task.activity_id == "A"
    assert task.activity_type.name == "work"
    assert task.input == payload({"id": "A"})
    assert task.heartbeat_timeout == dur(30)
    assert (task.scheduled_event_id, task.started_event_id, task.attempt) == (5, 6, 1)


# -- history ----------------------------------------------------------------------------


async def test_history_follow_until_the_run_closes(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await wf.start()

    async def follow() -> tuple[list[h.HistoryEvent], int]:
        events: list[h.HistoryEvent] = []
        token = b""
        calls = 0
        while True:
            calls += 1
            resp = await stub.GetWorkflowHistory(
                s.GetWorkflowHistoryRequest(
                    execution=execution(wf), next_page_token=token, wait_new_event=True
                )
            )
            assert resp.run_id == wf.run_id
            events.extend(resp.events)
            token = resp.next_page_token
            if not token:
                return events, calls

    follower = asyncio.create_task(follow())
    await wf.decide(await wf.poll_decision(), schedule("A", "work", acts))
    await wf.finish_activity(await wf.poll_activity(acts))
    await signal(wf)
    await wf.decide(await wf.poll_decision(), complete("done"))

    followed, calls = await follower
    full = await wf.history()
    assert followed == full
    assert followed[-1].type == "WorkflowSuccess"
    assert [e.event_id for e in followed] == list(range(1, len(full) + 1))
    assert calls > 1

    # A closed run: the follower's token, once empty, stays empty.
    last = await stub.GetWorkflowHistory(
        s.GetWorkflowHistoryRequest(execution=execution(wf), wait_new_event=True)
    )
    assert last.events == full
    assert not last.next_page_token


async def test_history_paging(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    for n in range(4):
        await signal(wf, f"s{n}")
    task = await wf.poll_decision()
    await wf.decide(task, complete("done"))
    full = await wf.history()
    assert len(full) == 9

    pages: list[list[h.HistoryEvent]] = []
    token = b""
    while True:
        resp = await stub.GetWorkflowHistory(
            s.GetWorkflowHistoryRequest(execution=execution(wf), page_size=2, next_page_token=token)
        )
        pages.append(list(resp.events))
        token = resp.next_page_token
        if not token:
            break
    assert [len(p) for p in pages] == [2, 2, 2, 2, 1]
    assert [e for p in pages for e in p] == full

    # A plain read of an open run ends at the history as it stands; a follower
    # (wait_new_event) is given a token while the run is open, to ask for what comes next.
    other = Driver(stub)
    await other.start()
    resp = await stub.GetWorkflowHistory(s.GetWorkflowHistoryRequest(execution=execution(other)))
    assert len(resp.events) == 2
    assert not resp.next_page_token
    resp = await stub.GetWorkflowHistory(
        s.GetWorkflowHistoryRequest(execution=execution(other), wait_new_event=True)
    )
    assert len(resp.events) == 2
    assert resp.next_page_token
    await signal(other)
    more = await stub.GetWorkflowHistory(
        s.GetWorkflowHistoryRequest(
            execution=execution(other), next_page_token=resp.next_page_token
        )
    )
    assert [e.type for e in more.events] == ["Signal"]


async def test_history_last_page_of_a_closed_run_has_no_token(
    stub: sg.WorkflowServiceStub,
) -> None:
    """GetWorkflowHistoryResponse.next_page_token is "empty when the run is closed and
    every event has been returned", also when the last page happens to be full."""
    wf = Driver(stub)
    await wf.start()
    for n in range(3):
        await signal(wf, f"s{n}")
    await wf.decide(await wf.poll_decision(), complete("done"))
    full = await wf.history()
    assert len(full) == 8

    first = await stub.GetWorkflowHistory(
        s.GetWorkflowHistoryRequest(execution=execution(wf), page_size=4)
    )
    assert first.events == full[:4]
    assert first.next_page_token
    second = await stub.GetWorkflowHistory(
        s.GetWorkflowHistoryRequest(
            execution=execution(wf), page_size=4, next_page_token=first.next_page_token
        )
    )
    assert second.events == full[4:]
    assert not second.next_page_token


# -- describe and list ----------------------------------------------------------------------


async def test_describe_workflow(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await wf.start(execution_timeout=dur(3600), decider_timeout=dur(20))
    described = await describe(wf)
    assert described.decider_state == "scheduled"
    assert described.info.status == c.WORKFLOW_STATUS_OPEN
    assert described.info.execution == execution(wf, wf.run_id)
    assert described.info.workflow_type.name == "order"
    assert described.info.task_list == wf.task_list
    assert described.info.history_length == 2
    assert described.execution_timeout == dur(3600)
    assert described.decider_timeout == dur(20)
    assert not described.cancel_requested

    task = await wf.poll_decision()
    assert (await describe(wf)).decider_state == "started"
    await signal(wf)
    assert (await describe(wf)).decider_state == "started+scheduled"
    await wf.decide(
        task,
        schedule("A", "work", acts, heartbeat=30),
        schedule("B", "other", acts),
        timer("t", 3600),
    )
    activity = await wf.poll_activity(acts)
    assert activity.activity_id == "A"
    await stub.RecordActivityHeartbeat(
        s.RecordActivityHeartbeatRequest(
            task_token=activity.task_token, details=payload({"progress": 40})
        )
    )

    described = await describe(wf)
    assert described.decider_state == "scheduled"
    pending = {p.activity_id: p for p in described.pending_activities}
    assert set(pending) == {"A", "B"}
    a, b = pending["A"], pending["B"]
    assert (a.state, a.activity_type.name, a.task_list) == ("started", "work", acts)
    assert a.identity == "runner-1"
    assert a.started_event_id > a.scheduled_event_id > 0
    assert a.heartbeat_details == payload({"progress": 40})
    assert a.HasField("last_heartbeat_time")
    assert (b.state, b.activity_type.name, b.started_event_id) == ("scheduled", "other", 0)
    assert not b.HasField("heartbeat_details")
    [t] = described.pending_timers
    assert t.timer_id == "t"
    assert t.started_event_id > 0
    assert t.fire_time.seconds > described.info.start_time.seconds + 3000

    # Cancel requested shows on the activity.
    await wf.decide(
        await wf.poll_decision(),
        d.Decision(request_cancel_activity=d.RequestCancelActivityDecision(activity_id="A")),
    )
    pending = {p.activity_id: p for p in (await describe(wf)).pending_activities}
    assert pending["A"].state == "cancel_requested"


async def test_list_workflows(stub: sg.WorkflowServiceStub) -> None:
    alphas = [Driver(stub) for _ in range(3)]
    betas = [Driver(stub) for _ in range(2)]
    for wf in alphas:
        await wf.start()
    for wf in betas:
        await stub.StartWorkflow(
            s.StartWorkflowRequest(
                workflow_id=wf.workflow_id,
                workflow_type=c.WorkflowType(name="beta"),
                task_list=wf.task_list,
            )
        )
    closed = alphas[0]
    await closed.decide(await closed.poll_decision(), complete("done"))

    async def ids(**fields: object) -> set[str]:
        resp = await stub.ListWorkflows(s.ListWorkflowsRequest(**fields))  # type: ignore[arg-type]
        return {e.execution.workflow_id for e in resp.executions}

    everyone = {wf.workflow_id for wf in alphas + betas}
    assert await ids() == everyone
    assert await ids(status_filter=s.STATUS_FILTER_OPEN) == everyone - {closed.workflow_id}
    assert await ids(status_filter=s.STATUS_FILTER_CLOSED) == {closed.workflow_id}
    assert await ids(workflow_type="order") == {wf.workflow_id for wf in alphas}
    assert await ids(workflow_type="beta") == {wf.workflow_id for wf in betas}
    assert await ids(workflow_type="beta", status_filter=s.STATUS_FILTER_CLOSED) == set()
    assert await ids(workflow_id=betas[1].workflow_id) == {betas[1].workflow_id}

    [info] = (
        await stub.ListWorkflows(s.ListWorkflowsRequest(status_filter=s.STATUS_FILTER_CLOSED))
    ).executions
    assert info.status == c.WORKFLOW_STATUS_COMPLETED
    assert info.HasField("close_time")
    assert info.history_length == 5

    pages: list[list[c.WorkflowExecutionInfo]] = []
    token = b""
    while True:
        resp = await stub.ListWorkflows(s.ListWorkflowsRequest(page_size=2, next_page_token=token))
        pages.append(list(resp.executions))
        token = resp.next_page_token
        if not token:
            break
    listed = [e for p in pages for e in p]
    assert [len(p) for p in pages[:3]] == [2, 2, 1]
    assert all(not p for p in pages[3:])
    assert len({e.execution.run_id for e in listed}) == 5
    assert {e.execution.workflow_id for e in listed} == everyone
    starts = [e.start_time.ToNanoseconds() for e in listed]
    assert starts == sorted(starts, reverse=True)  # newest first


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

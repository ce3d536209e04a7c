"""The WorkflowService API end to end through the real gRPC server: polls and
their matching, history following and paging, describe, list. Signal-with-start,
cancel, terminate, continue-as-new, registered defaults, task lists and health are
in test_api_lifecycle.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.e2e.api_calls import describe, execution, signal, task_list, timer
from tests.helpers import Driver, complete, dur, payload, schedule, unique, wait_until

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

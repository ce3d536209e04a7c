"""Every timeout kind, end to end through the real gRPC server: it fires, the
decider is rescheduled, and an answer that arrives after its timeout is refused
(NOT_FOUND, or FAILED_PRECONDITION once the run is closed) and appends nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import grpc
import pytest

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


def timer(timer_id: str, seconds: float) -> d.Decision:
    return d.Decision(
        start_timer=d.StartTimerDecision(timer_id=timer_id, start_to_fire_timeout=dur(seconds))
    )


def cancel_timer(timer_id: str) -> d.Decision:
    return d.Decision(cancel_timer=d.CancelTimerDecision(timer_id=timer_id))


async def history_until(wf: Driver, *tail: str) -> list[h.HistoryEvent]:
    """Wait until the history ends with the event types `tail`; return it."""

    async def check() -> list[h.HistoryEvent]:
        events = await wf.history()
        return events if [e.type for e in events[-len(tail) :]] == list(tail) else []

    return await wait_until(check)


def late_completion(wf: Driver, task: s.PollForActivityTaskResponse) -> Awaitable[object]:
    return wf.stub.RespondActivityTaskCompleted(
        s.RespondActivityTaskCompletedRequest(
            task_token=task.task_token, result=payload("late"), identity="runner-1"
        )
    )


async def started_activity(wf: Driver, **timeouts: float) -> s.PollForActivityTaskResponse:
    """Start a run, schedule activity "A" with `timeouts`, and let a runner take it."""
    acts = unique("acts")
    await wf.start()
    await wf.decide(await wf.poll_decision(), schedule("A", "work", acts, **timeouts))
    task = await wf.poll_activity(acts)
    assert task.activity_id == "A"
    return task


# -- decider --------------------------------------------------------------------------


async def test_decider_start_to_close_timeout(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start(decider_timeout=dur(0.5))
    first = await wf.poll_decision()
    assert first.started_event_id == 3

    events = await history_until(wf, "DeciderTimedOut", "DeciderScheduled")
    assert [e.type for e in events] == [
        "WorkflowStarted",
        "DeciderScheduled",
        "DeciderStarted",
        "DeciderTimedOut",
        "DeciderScheduled",
    ]
    timed_out = events[3].decider_timed_out
    assert (timed_out.scheduled_event_id, timed_out.started_event_id) == (2, 3)
    assert timed_out.timeout_type == "START_TO_CLOSE"

    message = await refused(
        stub.RespondDecisionTaskCompleted(
            s.RespondDecisionTaskCompletedRequest(
                task_token=first.task_token, decisions=[complete("late")], identity="decider-1"
            )
        ),
        grpc.StatusCode.NOT_FOUND,
    )
    assert "decision task" in message
    assert len(await wf.history()) == 5

    second = await wf.poll_decision()
    assert second.task_token
    assert second.started_event_id == 6
    assert second.previous_started_event_id == 0  # the timed-out task never completed
    assert [e.type for e in second.events][-3:] == [
        "DeciderTimedOut",
        "DeciderScheduled",
        "DeciderStarted",
    ]


# -- activities -----------------------------------------------------------------------


async def test_activity_schedule_to_start_timeout(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await wf.start()
    await wf.decide(
        await wf.poll_decision(),
        schedule("A", "work", acts, schedule_to_start=0.3, start_to_close=30),
    )
    events = await history_until(wf, "ActivityScheduledTimeout", "DeciderScheduled")
    assert [e.type for e in events][4:] == [
        "ActivityScheduled",
        "ActivityScheduledTimeout",
        "DeciderScheduled",
    ]
    assert events[5].activity_scheduled_timeout.scheduled_event_id == 5
    assert events[5].activity_scheduled_timeout.timeout_type == "SCHEDULE_TO_START"
    # The task is gone: no runner can take the timed-out activity any more.
    backlog = await stub.DescribeTaskList(
        s.DescribeTaskListRequest(task_list=acts, kind=c.TASK_LIST_KIND_ACTIVITY)
    )
    assert backlog.backlog == 0
    described = await stub.DescribeWorkflow(
        s.DescribeWorkflowRequest(execution=c.WorkflowExecution(workflow_id=wf.workflow_id))
    )
    assert not described.pending_activities


@pytest.mark.parametrize(
    ("timeouts", "timeout_type"),
    [
        ({"start_to_close": 0.4}, "START_TO_CLOSE"),
        ({"start_to_close": 30, "schedule_to_close": 0.5}, "SCHEDULE_TO_CLOSE"),
    ],
)
async def test_activity_timeout_after_start(
    stub: sg.WorkflowServiceStub, timeouts: dict[str, float], timeout_type: str
) -> None:
    wf = Driver(stub)
    task = await started_activity(wf, **timeouts)

    events = await history_until(wf, "ActivityTimedOut", "DeciderScheduled")
    assert [e.type for e in events][4:] == [
        "ActivityScheduled",
        "ActivityStarted",
        "ActivityTimedOut",
        "DeciderScheduled",
    ]
    attrs = events[6].activity_timed_out
    assert attrs.timeout_type == timeout_type
    assert (attrs.scheduled_event_id, attrs.started_event_id) == (5, 6)
    assert not attrs.HasField("details")  # no heartbeat was ever sent

    message = await refused(late_completion(wf, task), grpc.StatusCode.NOT_FOUND)
    assert "activity task" in message
    assert len(await wf.history()) == len(events)


async def test_activity_heartbeat_timeout_carries_last_details(
    stub: sg.WorkflowServiceStub,
) -> None:
    wf = Driver(stub)
    task = await started_activity(wf, start_to_close=30, heartbeat=0.6)

    # Heartbeat well past the heartbeat timeout: each beat pushes the deadline on.
    loop = asyncio.get_running_loop()
    until = loop.time() + 1.5
    beats = 0
    while loop.time() < until:
        beats += 1
        resp = await stub.RecordActivityHeartbeat(
            s.RecordActivityHeartbeatRequest(
                task_token=task.task_token, details=payload({"beat": beats}), identity="runner-1"
            )
        )
        assert not resp.cancel_requested
        await asyncio.sleep(0.1)  # pacing between beats, not a wait for a condition
    assert "ActivityTimedOut" not in await wf.types()

    # Stop heartbeating: the heartbeat timeout fires with the last details.
    events = await history_until(wf, "ActivityTimedOut", "DeciderScheduled")
    assert [e.type for e in events][4:] == [
        "ActivityScheduled",
        "ActivityStarted",
        "ActivityTimedOut",
        "DeciderScheduled",
    ]
    attrs = events[6].activity_timed_out
    assert attrs.timeout_type == "HEARTBEAT"
    assert attrs.details == payload({"beat": beats})
    # Heartbeats are not history events.
    assert len(events) == 8

    await refused(late_completion(wf, task), grpc.StatusCode.NOT_FOUND)
    await refused(
        stub.RecordActivityHeartbeat(
            s.RecordActivityHeartbeatRequest(task_token=task.task_token, identity="runner-1")
        ),
        grpc.StatusCode.NOT_FOUND,
    )
    assert len(await wf.history()) == len(events)


async def test_heartbeat_reports_cancel_request_then_activity_canceled(
    stub: sg.WorkflowServiceStub,
) -> None:
    wf = Driver(stub)
    task = await started_activity(wf, start_to_close=30)
    beat = await stub.RecordActivityHeartbeat(
        s.RecordActivityHeartbeatRequest(task_token=task.task_token, identity="runner-1")
    )
    assert not beat.cancel_requested

    # A signal gives the decider a task, in which it asks for the cancel.
    await stub.SignalWorkflow(
        s.SignalWorkflowRequest(
            execution=c.WorkflowExecution(workflow_id=wf.workflow_id), signal_name="stop"
        )
    )
    await wf.decide(
        await wf.poll_decision(),
        d.Decision(request_cancel_activity=d.RequestCancelActivityDecision(activity_id="A")),
    )
    assert (await wf.types())[-1] == "ActivityCancelRequested"

    beat = await stub.RecordActivityHeartbeat(
        s.RecordActivityHeartbeatRequest(task_token=task.task_token, identity="runner-1")
    )
    assert beat.cancel_requested

    await stub.RespondActivityTaskCanceled(
        s.RespondActivityTaskCanceledRequest(
            task_token=task.task_token, details=payload("stopped"), identity="runner-1"
        )
    )
    events = await wf.history()
    assert [e.type for e in events][-3:] == [
        "ActivityCancelRequested",
        "ActivityCanceled",
        "DeciderScheduled",
    ]
    canceled = events[-2].activity_canceled
    assert canceled.scheduled_event_id == 5
    assert canceled.latest_cancel_requested_event_id == events[-3].event_id
    assert canceled.details == payload("stopped")

    await refused(late_completion(wf, task), grpc.StatusCode.NOT_FOUND)
    assert len(await wf.history()) == len(events)


# -- user timers ------------------------------------------------------------------------


async def test_user_timer_fires_and_bad_timer_decisions_fail(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    await wf.decide(await wf.poll_decision(), timer("t1", 0.3))

    events = await history_until(wf, "TimerExpired", "DeciderScheduled")
    assert [e.type for e in events][3:] == [
        "DeciderCompleted",
        "TimerScheduled",
        "TimerExpired",
        "DeciderScheduled",
    ]
    assert events[4].timer_scheduled.timer_id == "t1"
    assert events[5].timer_expired.timer_id == "t1"
    assert events[5].timer_expired.started_event_id == 5

    # A duplicate timer id, and a cancel of the timer that already fired.
    task = await wf.poll_decision()
    await wf.decide(task, timer("t2", 60), timer("t2", 60), cancel_timer("t1"))
    events = await wf.history()
    assert [e.type for e in events][8:] == [
        "DeciderCompleted",
        "TimerScheduled",
        "TimerScheduleFailed",
        "TimerCancelFailed",
        "DeciderScheduled",
    ]
    failed = events[10].timer_schedule_failed
    assert (failed.timer_id, failed.cause) == ("t2", "TIMER_ID_ALREADY_IN_USE")
    assert failed.decider_completed_event_id == 9
    cancel_failed = events[11].timer_cancel_failed
    assert cancel_failed.timer_id == "t1"
    assert cancel_failed.cause

    # The pending timer t2 can still be canceled.
    await wf.decide(await wf.poll_decision(), cancel_timer("t2"))
    canceled = (await wf.history())[-1]
    assert canceled.type == "TimerCanceled"
    assert canceled.timer_canceled.started_event_id == 10
    described = await stub.DescribeWorkflow(
        s.DescribeWorkflowRequest(execution=c.WorkflowExecution(workflow_id=wf.workflow_id))
    )
    assert not described.pending_timers


# -- workflow execution ---------------------------------------------------------------------


async def test_workflow_execution_timeout_closes_the_run(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    acts = unique("acts")
    await wf.start(execution_timeout=dur(1.0))
    await wf.decide(
        await wf.poll_decision(), schedule("A", "work", acts, start_to_close=30), timer("t", 60)
    )
    activity = await wf.poll_activity(acts)
    await stub.SignalWorkflow(
        s.SignalWorkflowRequest(
            execution=c.WorkflowExecution(workflow_id=wf.workflow_id), signal_name="go"
        )
    )
    decision = await wf.poll_decision()  # held, never answered in time
    assert decision.task_token

    async def timed_out() -> list[h.HistoryEvent]:
        events = await wf.history()
        return events if "WorkflowTimedOut" in [e.type for e in events] else []

    events = await wait_until(timed_out)
    assert events[-1].type == "WorkflowTimedOut"
    assert events[-1].workflow_timed_out.timeout_type == "START_TO_CLOSE"
    assert [e.event_id for e in events] == list(range(1, len(events) + 1))

    execution = c.WorkflowExecution(workflow_id=wf.workflow_id)
    described = await stub.DescribeWorkflow(s.DescribeWorkflowRequest(execution=execution))
    assert described.info.status == c.WORKFLOW_STATUS_TIMED_OUT
    assert described.info.HasField("close_time")
    assert not described.pending_activities
    assert not described.pending_timers
    assert described.decider_state == "none"

    await refused(
        stub.RespondDecisionTaskCompleted(
            s.RespondDecisionTaskCompletedRequest(
                task_token=decision.task_token, decisions=[complete("late")]
            )
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    await refused(
        stub.SignalWorkflow(s.SignalWorkflowRequest(execution=execution, signal_name="late")),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    await refused(late_completion(wf, activity), grpc.StatusCode.FAILED_PRECONDITION)
    assert len(await wf.history()) == len(events)

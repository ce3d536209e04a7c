"""Seed 002's two example histories, reproduced event for event through the
real gRPC server (SEED-HISTORIES.md)."""

from __future__ import annotations

from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, schedule, unique


async def test_perfect_empty_execution(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    task = await wf.poll_decision()
    assert task.started_event_id == 3
    assert task.previous_started_event_id == 0
    assert [e.type for e in task.events] == [
        "WorkflowStarted",
        "DeciderScheduled",
        "DeciderStarted",
    ]
    await wf.decide(task, complete("done"))

    assert await wf.types() == [
        "WorkflowStarted",
        "DeciderScheduled",
        "DeciderStarted",
        "DeciderCompleted",
        "WorkflowSuccess",
    ]


async def test_perfect_workflow_with_multiple_activities(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    list_a, list_b, list_c = unique("a"), unique("b"), unique("c")
    await wf.start()

    first = await wf.poll_decision()  # 3
    await wf.decide(first, schedule("A", "task-a", list_a), schedule("B", "task-b", list_b))  # 4-6
    task_b = await wf.poll_activity(list_b)  # 7
    task_a = await wf.poll_activity(list_a)  # 8
    assert (task_b.activity_id, task_b.started_event_id) == ("B", 7)
    assert (task_a.activity_id, task_a.started_event_id) == ("A", 8)
    await wf.finish_activity(task_b)  # 9, and 10 DeciderScheduled

    second = await wf.poll_decision()  # 11: its window is 4..11
    assert second.started_event_id == 11
    assert second.previous_started_event_id == 3
    assert [e.event_id for e in second.events][-1] == 11

    await wf.finish_activity(task_a)  # 12, and 13 DeciderScheduled (queued behind 11)
    # 13 may not be handed out while 11 is still being worked on.
    nothing = await wf.poll_decision()
    assert not nothing.task_token

    await wf.decide(second, schedule("C", "task-c", list_c))  # 14, 15
    third = await wf.poll_decision()  # 16: window 11..16
    assert third.started_event_id == 16
    assert third.previous_started_event_id == 11
    assert not any(e.event_id > 16 for e in third.events)
    task_c = await wf.poll_activity(list_c)  # 17
    await wf.decide(third)  # 18: C already scheduled, nothing to do
    await wf.finish_activity(task_c)  # 19, 20
    last = await wf.poll_decision()  # 21
    assert last.previous_started_event_id == 16
    await wf.decide(last, complete("all done"))  # 22, 23

    events = await wf.history()
    assert [(e.event_id, e.type) for e in events] == list(
        enumerate(
            [
                "WorkflowStarted",
                "DeciderScheduled",
                "DeciderStarted",
                "DeciderCompleted",
                "ActivityScheduled",
                "ActivityScheduled",
                "ActivityStarted",
                "ActivityStarted",
                "ActivitySuccess",
                "DeciderScheduled",
                "DeciderStarted",
                "ActivitySuccess",
                "DeciderScheduled",
                "DeciderCompleted",
                "ActivityScheduled",
                "DeciderStarted",
                "ActivityStarted",
                "DeciderCompleted",
                "ActivitySuccess",
                "DeciderScheduled",
                "DeciderStarted",
                "DeciderCompleted",
                "WorkflowSuccess",
            ],
            start=1,
        )
    )
    by_id = {e.event_id: e for e in events}
    assert by_id[5].activity_scheduled.activity_id == "A"
    assert by_id[6].activity_scheduled.activity_id == "B"
    assert by_id[7].activity_started.scheduled_event_id == 6
    assert by_id[9].activity_success.scheduled_event_id == 6
    assert by_id[12].activity_success.scheduled_event_id == 5
    assert by_id[15].activity_scheduled.activity_id == "C"
    assert by_id[16].decider_started.scheduled_event_id == 13

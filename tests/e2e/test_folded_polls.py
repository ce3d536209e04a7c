"""A poll folded into a worker's answer (`next_poll`): the answer is written
first, then the call waits as that poll would (for `--folded-poll` at most)
and carries what it got. A bad
poll refuses the whole call before anything is written; a poll that may not
wait leaves the answer standing and comes back empty."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import grpc
import pytest

from orchestrator.config import ServerConfig
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.e2e.api_calls import refused, serving
from tests.helpers import Driver, payload, schedule


@pytest.fixture
def server_config(db_url: str) -> ServerConfig:
    """A long poll that outlasts each test, folded polls too: a folded poll waits
    for what comes."""
    return ServerConfig(
        db_url=db_url, listen="127.0.0.1:0", long_poll=30.0, folded_poll=30.0, drain_grace=1.0
    )


def _activity_poll(wf: Driver, task_list: str, **fields: str) -> s.PollForActivityTaskRequest:
    return s.PollForActivityTaskRequest(
        namespace=wf.namespace, task_list=task_list, identity="runner-1", **fields
    )


def _scheduled_a1_and_polling(
    wf: Driver, task: s.PollForDecisionTaskResponse
) -> s.RespondDecisionTaskCompletedRequest:
    """The answer to `task` that schedules `a1` on `acts`, with the next decision
    poll folded in."""
    return s.RespondDecisionTaskCompletedRequest(
        task_token=task.task_token,
        decisions=[schedule("a1", "work", "acts")],
        identity="decider-1",
        next_poll=s.PollForDecisionTaskRequest(
            namespace=wf.namespace, task_list=wf.task_list, identity="decider-1"
        ),
    )


def _completed(
    task: s.PollForActivityTaskResponse, next_poll: s.PollForActivityTaskRequest
) -> s.RespondActivityTaskCompletedRequest:
    return s.RespondActivityTaskCompletedRequest(
        task_token=task.task_token, result=payload("ok"), identity="runner-1", next_poll=next_poll
    )


async def _two_activities(wf: Driver, task_list: str) -> s.PollForActivityTaskResponse:
    """A run with activities a1 and a2 scheduled on `task_list`; a1's task, started."""
    await wf.start()
    await wf.decide(
        await wf.poll_decision(),
        schedule("a1", "work", task_list),
        schedule("a2", "work", task_list),
    )
    first = await wf.poll_activity(task_list)
    assert first.activity_id == "a1"
    return first


async def test_an_activity_answer_brings_the_next_task_of_the_list(
    stub: sg.WorkflowServiceStub,
) -> None:
    wf = Driver(stub)
    first = await _two_activities(wf, "acts")

    resp = await stub.RespondActivityTaskCompleted(_completed(first, _activity_poll(wf, "acts")))

    assert resp.next_task.activity_id == "a2" and resp.next_task.task_token
    assert resp.next_task.input == payload({"id": "a2"})
    kinds = await wf.types()
    assert kinds.count("ActivitySuccess") == 1 and kinds.count("ActivityStarted") == 2


async def test_a_folded_poll_waits_and_is_handed_the_task_a_commit_makes(
    stub: sg.WorkflowServiceStub,
) -> None:
    """A decision answer that folds in a decision poll: the activity's result
    schedules the next decision task, handed to the poll that waits in the answer."""
    wf = Driver(stub)
    await wf.start()
    task = await wf.poll_decision()
    answer = asyncio.ensure_future(
        stub.RespondDecisionTaskCompleted(_scheduled_a1_and_polling(wf, task))
    )
    activity = await wf.poll_activity("acts")  # the decisions were written before the wait
    assert activity.task_token and not answer.done()
    await wf.finish_activity(activity)

    resp = await answer
    assert resp.next_task.task_token
    assert resp.next_task.workflow_execution.run_id == wf.run_id
    assert resp.next_task.previous_started_event_id == task.started_event_id
    assert (await wf.types())[-1] == "DeciderStarted"


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("task_list", "", "task_list"),
        ("namespace", "*", "namespace"),
        ("task_list", "tab\tin it", "control characters"),
        ("worker_session_id", "x" * 1000, "worker_session_id"),
    ],
)
async def test_a_malformed_folded_poll_refuses_the_answer_and_writes_nothing(
    stub: sg.WorkflowServiceStub, field: str, value: str, says: str
) -> None:
    wf = Driver(stub)
    first = await _two_activities(wf, "acts")
    before = await wf.types()
    bad = _activity_poll(wf, "acts")
    setattr(bad, field, value)

    message = await refused(
        stub.RespondActivityTaskCompleted(_completed(first, bad)), grpc.StatusCode.INVALID_ARGUMENT
    )

    assert says in message
    assert await wf.types() == before
    await wf.finish_activity(first)  # the task is still open: answered alone, it is taken
    assert (await wf.types()).count("ActivitySuccess") == 1


async def test_a_decision_answer_with_a_malformed_folded_poll_is_refused_whole(
    stub: sg.WorkflowServiceStub,
) -> None:
    wf = Driver(stub)
    await wf.start()
    task = await wf.poll_decision()
    before = await wf.types()

    await refused(
        stub.RespondDecisionTaskCompleted(
            s.RespondDecisionTaskCompletedRequest(
                task_token=task.task_token,
                decisions=[schedule("a1", "work", "acts")],
                next_poll=s.PollForDecisionTaskRequest(namespace=wf.namespace, task_list=""),
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )

    assert await wf.types() == before  # no DeciderCompleted, no ActivityScheduled
    await wf.decide(task, schedule("a1", "work", "acts"))  # still the task to answer
    assert (await wf.types()).count("ActivityScheduled") == 1


async def test_a_folded_poll_that_may_not_wait_leaves_the_answer_standing(
    stub: sg.WorkflowServiceStub,
) -> None:
    """Its worker session has ended: a poll of its own would be refused
    (FAILED_PRECONDITION); folded, the result is written and the call answers
    with no task, so the worker's next poll meets the refusal."""
    session = await stub.RegisterWorker(
        s.RegisterWorkerRequest(
            namespace="default",
            identity="runner-1",
            task_lists=[s.WorkerTaskList(name="acts", kind=c.TASK_LIST_KIND_ACTIVITY)],
        )
    )
    await stub.UnregisterWorker(
        s.UnregisterWorkerRequest(namespace="default", worker_session_id=session.worker_session_id)
    )
    wf = Driver(stub)
    first = await _two_activities(wf, "acts")

    resp = await stub.RespondActivityTaskCompleted(
        _completed(first, _activity_poll(wf, "acts", worker_session_id=session.worker_session_id))
    )

    assert resp.HasField("next_task") and not resp.next_task.task_token
    kinds = await wf.types()
    assert kinds.count("ActivitySuccess") == 1 and kinds.count("ActivityStarted") == 1
    await refused(
        stub.PollForActivityTask(
            _activity_poll(wf, "acts", worker_session_id=session.worker_session_id)
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )


async def test_an_answer_without_a_folded_poll_carries_no_task(
    stub: sg.WorkflowServiceStub,
) -> None:
    wf = Driver(stub)
    first = await _two_activities(wf, "acts")
    resp = await stub.RespondActivityTaskCompleted(
        s.RespondActivityTaskCompletedRequest(task_token=first.task_token, result=payload("ok"))
    )
    assert not resp.HasField("next_task")
    assert (await wf.types()).count("ActivityStarted") == 1  # a2 waits for a poll


async def test_a_folded_poll_comes_back_empty_after_the_folded_poll_wait(
    server_config: ServerConfig,
) -> None:
    """`--folded-poll` 0.5 s under a 30 s long poll: an answer whose folded poll
    gets nothing returns empty within a few seconds, its result written, while a
    poll of its own still waits; the task a commit makes then goes to that poll."""
    async with serving(dataclasses.replace(server_config, folded_poll=0.5)) as stub:
        wf = Driver(stub)
        await wf.start()
        await wf.decide(await wf.poll_decision(), schedule("a1", "work", "acts"))
        first = await wf.poll_activity("acts")
        own = asyncio.ensure_future(stub.PollForActivityTask(_activity_poll(wf, "other")))

        began = time.monotonic()
        resp = await stub.RespondActivityTaskCompleted(
            _completed(first, _activity_poll(wf, "acts"))
        )

        assert 0.4 < time.monotonic() - began < 10  # (it waited; the long poll is 30 s)
        assert resp.HasField("next_task") and not resp.next_task.task_token
        assert (await wf.types()).count("ActivitySuccess") == 1
        assert not own.done()
        await wf.decide(await wf.poll_decision(), schedule("a2", "work", "other"))
        assert (await asyncio.wait_for(own, 10)).activity_id == "a2"


async def test_a_folded_poll_waits_no_longer_than_the_long_poll(
    server_config: ServerConfig,
) -> None:
    """A long poll of 0.5 s under a folded poll of 30 s: a decision answer whose
    folded poll gets nothing returns empty after the long poll, its decisions
    written."""
    shorter = dataclasses.replace(server_config, long_poll=0.5, folded_poll=30.0)
    async with serving(shorter) as stub:
        wf = Driver(stub)
        await wf.start()
        task = await wf.poll_decision()
        began = time.monotonic()
        resp = await stub.RespondDecisionTaskCompleted(_scheduled_a1_and_polling(wf, task))

        assert 0.4 < time.monotonic() - began < 10
        assert resp.HasField("next_task") and not resp.next_task.task_token
        assert (await wf.types()).count("ActivityScheduled") == 1

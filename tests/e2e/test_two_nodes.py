"""Scale-out: two `weft server` processes on one PostgreSQL database share
nothing but it. A task committed through one node wakes a poller waiting on the
other (LISTEN/NOTIFY) at once, and concurrent pollers on both nodes never get
the same task twice."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, dur, schedule, unique, wait_until
from tests.serverproc import ServerProcess

MAX_WAKE_DELAY = 1.0  # the bound for a cross-node hand-over
LONG_POLL = "10s"  # far above the bound: a missed wake-up shows as a slow answer, not an empty one


@pytest.fixture
async def nodes(postgres_url: str, tmp_path: Path) -> AsyncIterator[tuple[ServerProcess, ...]]:
    a = ServerProcess(postgres_url, tmp_path, name="node-a", long_poll=LONG_POLL)
    b = ServerProcess(postgres_url, tmp_path, name="node-b", long_poll=LONG_POLL)
    try:
        await asyncio.gather(a.start(), b.start())
        yield a, b
    finally:
        a.stop()
        b.stop()


async def _poller_waiting(
    stub: sg.WorkflowServiceStub, task_list: str, kind: int, identity: str
) -> bool:
    resp = await stub.DescribeTaskList(
        s.DescribeTaskListRequest(namespace="default", task_list=task_list, kind=kind)
    )
    return any(p.identity == identity for p in resp.pollers)


async def test_task_committed_on_b_wakes_poller_on_a(nodes: tuple[ServerProcess, ...]) -> None:
    node_a, node_b = nodes
    async with node_a.channel() as chan_a, node_b.channel() as chan_b:
        stub_a, stub_b = sg.WorkflowServiceStub(chan_a), sg.WorkflowServiceStub(chan_b)
        on_a, on_b = Driver(stub_a), Driver(stub_b)
        on_b.task_list = on_a.task_list
        on_b.workflow_id = on_a.workflow_id

        # A decider long-polls node A; the workflow is started through node B.
        poll = asyncio.create_task(on_a.poll_decision())
        await wait_until(
            lambda: _poller_waiting(stub_a, on_a.task_list, c.TASK_LIST_KIND_DECISION, "decider-1")
        )
        assert not poll.done(), "the poll answered before there was a task"
        t0 = time.monotonic()
        await on_b.start()
        task = await poll
        delay = time.monotonic() - t0
        assert task.task_token, "node A's poll ended empty"
        assert task.workflow_execution.run_id == on_b.run_id
        print(f"decision task: started on B, delivered on A after {delay * 1000:.0f} ms")
        assert delay < MAX_WAKE_DELAY, f"decision task reached node A after {delay:.3f}s"

        # The decision is answered on B; a runner waiting on A gets the activity.
        activities = unique("acts")
        runner = asyncio.create_task(on_a.poll_activity(activities, identity="runner-a"))
        await wait_until(
            lambda: _poller_waiting(stub_a, activities, c.TASK_LIST_KIND_ACTIVITY, "runner-a")
        )
        assert not runner.done()
        t0 = time.monotonic()
        await on_b.decide(task, schedule("x", "work", activities, start_to_close=30))
        act = await runner
        delay = time.monotonic() - t0
        assert act.task_token, "node A's activity poll ended empty"
        assert (act.activity_id, act.workflow_execution.run_id) == ("x", on_b.run_id)
        print(f"activity task: scheduled on B, delivered on A after {delay * 1000:.0f} ms")
        assert delay < MAX_WAKE_DELAY, f"activity task reached node A after {delay:.3f}s"

        # The runner answers on A; the decider, now on B, closes the workflow.
        await on_a.finish_activity(act)
        await on_b.decide(await on_b.poll_decision(), complete("done"))
        assert await on_a.types() == [
            "WorkflowStarted",
            "DeciderScheduled",
            "DeciderStarted",
            "DeciderCompleted",
            "ActivityScheduled",
            "ActivityStarted",
            "ActivitySuccess",
            "DeciderScheduled",
            "DeciderStarted",
            "DeciderCompleted",
            "WorkflowSuccess",
        ]


async def test_concurrent_deciders_on_both_nodes_never_share_a_task(
    nodes: tuple[ServerProcess, ...],
) -> None:
    n_workflows, n_deciders = 24, 8
    task_list = unique("shared")
    node_a, node_b = nodes
    async with node_a.channel() as chan_a, node_b.channel() as chan_b:
        stubs = [sg.WorkflowServiceStub(chan_a), sg.WorkflowServiceStub(chan_b)]
        handed_out: list[tuple[str, int, str]] = []
        closed: set[str] = set()
        all_closed = asyncio.Event()

        async def decider(n: int) -> None:
            stub, identity = stubs[n % 2], f"decider-{n}"
            while True:
                task = await stub.PollForDecisionTask(
                    s.PollForDecisionTaskRequest(
                        namespace="default", task_list=task_list, identity=identity
                    )
                )
                if not task.task_token:
                    continue
                run_id = task.workflow_execution.run_id
                handed_out.append((run_id, task.started_event_id, identity))
                types = {e.type for e in task.events}
                if "TimerExpired" in types:
                    decisions = [complete(run_id)]
                elif "TimerScheduled" in types:
                    decisions = []
                else:
                    # A timer makes a second decision task, fired by either node's scanner.
                    decisions = [
                        d.Decision(
                            start_timer=d.StartTimerDecision(
                                timer_id="t", start_to_fire_timeout=dur(0.1)
                            )
                        )
                    ]
                # Answered on the other node half the time: tokens are valid cluster-wide.
                answer = stubs[(n + task.started_event_id) % 2]
                await answer.RespondDecisionTaskCompleted(
                    s.RespondDecisionTaskCompletedRequest(
                        task_token=task.task_token, decisions=decisions, identity=identity
                    )
                )
                if decisions and decisions[0].HasField("complete_workflow"):
                    closed.add(run_id)
                    if len(closed) == n_workflows:
                        all_closed.set()

        deciders = [asyncio.create_task(decider(n)) for n in range(n_deciders)]
        try:
            workflows = []
            for i in range(n_workflows):
                wf = Driver(stubs[i % 2])
                wf.task_list = task_list
                workflows.append(wf)
            await asyncio.gather(*(wf.start() for wf in workflows))
            waiter = asyncio.create_task(all_closed.wait())
            finished, _ = await asyncio.wait(
                [waiter, *deciders], timeout=60, return_when=asyncio.FIRST_COMPLETED
            )
            for t in finished:
                if t is not waiter:
                    t.result()  # a decider failed: show why
            assert waiter in finished, f"only {len(closed)}/{n_workflows} workflows closed"
        finally:
            for t in deciders:
                t.cancel()
            await asyncio.gather(*deciders, return_exceptions=True)

        tasks = Counter((run, started) for run, started, _ in handed_out)
        duplicates = {k: n for k, n in tasks.items() if n > 1}
        assert not duplicates, f"tasks handed out twice: {duplicates}"
        assert len(tasks) == 2 * n_workflows
        assert {run for run, _ in tasks} == {wf.run_id for wf in workflows}
        for wf in workflows:
            types = await wf.types()
            assert types[-1] == "WorkflowSuccess", types
            assert Counter(types)["DeciderStarted"] == 2, types
            assert Counter(types)["TimerExpired"] == 1, types
            assert [e.event_id for e in await wf.history()] == list(range(1, len(types) + 1))


async def test_close_on_b_wakes_a_follower_on_a(nodes: tuple[ServerProcess, ...]) -> None:
    """A `result()` / history follow waiting on node A hears of a close committed
    on node B through the notification, not at its next re-check (2 s)."""
    node_a, node_b = nodes
    async with node_a.channel() as chan_a, node_b.channel() as chan_b:
        stub_a, stub_b = sg.WorkflowServiceStub(chan_a), sg.WorkflowServiceStub(chan_b)
        on_b = Driver(stub_b)
        await on_b.start()
        task = await on_b.poll_decision()
        execution = c.WorkflowExecution(workflow_id=on_b.workflow_id, run_id=on_b.run_id)
        first = await stub_a.GetWorkflowHistory(
            s.GetWorkflowHistoryRequest(
                namespace="default", execution=execution, wait_new_event=True
            )
        )
        assert first.next_page_token, "an open run's follower gets a token to wait on"
        follow = asyncio.ensure_future(
            stub_a.GetWorkflowHistory(
                s.GetWorkflowHistoryRequest(
                    namespace="default",
                    execution=execution,
                    wait_new_event=True,
                    next_page_token=first.next_page_token,
                )
            )
        )
        await asyncio.sleep(0.5)  # parked on A
        assert not follow.done(), "the follow answered before anything happened"
        t0 = time.monotonic()
        await on_b.decide(task, complete("done"))
        page = await follow
        delay = time.monotonic() - t0
        print(f"close on B reached a follower on A after {delay * 1000:.0f} ms")
        assert [e.type for e in page.events][-1] == "WorkflowSuccess"
        assert delay < MAX_WAKE_DELAY, f"the close reached node A after {delay:.3f}s"

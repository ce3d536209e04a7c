"""Edges of the worker loops found in review: an activity whose run is closed
under it, registration that must keep an operator's defaults, a blocking client
called from its own loop, and configurations that would starve a task list."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from sdk import (
    ActivityWorker,
    AsyncClient,
    Client,
    DeciderWorker,
    DecisionTask,
    WeftError,
    activity,
)
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from tests.helpers import wait_until
from tests.sdk.conftest import make_decider, wait_for_event

WAIT = timedelta(seconds=20)


async def test_an_activity_of_a_terminated_run_is_cancelled_not_left_running(
    client: AsyncClient, task_list: str
) -> None:
    seen: list[str] = []

    @activity(name="forever", heartbeat=timedelta(seconds=30))
    async def forever() -> None:
        try:
            while True:
                activity.heartbeat()
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    def decide(task: DecisionTask) -> None:
        if "a" not in task.activities:
            task.schedule_activity("a", forever, task_list=task_list)

    decider = make_decider("closing", decide)
    async with (
        DeciderWorker(client, task_lists=[task_list], deciders=[decider]),
        ActivityWorker(client, task_lists=[task_list], activities=[forever]) as worker,
    ):
        run = await client.start_workflow("closing", task_list=task_list)
        await wait_for_event(client, run.workflow_id, "ActivityStarted")
        await client.terminate(run.workflow_id, reason="done with it")
        # The heartbeat's answer (the run is closed) cancels the activity.
        await asyncio.wait_for(_until(lambda: seen == ["cancelled"]), timeout=10)
        assert isinstance(worker, ActivityWorker)
    history = await client.history(run.workflow_id)
    assert history[-1].type == "WorkflowTerminated"


async def _until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0.02)


async def test_a_decider_registering_its_task_list_keeps_other_registered_defaults(
    client: AsyncClient, task_list: str
) -> None:
    await client.register_workflow_type(
        "kept",
        default_task_list="elsewhere",
        default_execution_timeout=timedelta(days=2),
        default_decider_timeout=timedelta(seconds=30),
    )
    decider = make_decider("kept", lambda task: task.complete(), task_list=task_list)
    async with DeciderWorker(client, deciders=[decider], register_types=True):
        run = await client.start_workflow("kept")
        await client.result(run.workflow_id, timeout=WAIT)
    started = (await client.history(run.workflow_id))[0]
    assert started.get("task_list") == task_list
    assert started.get("execution_timeout") == 2 * 86400
    assert started.get("decider_timeout") == 30


def test_a_blocking_call_from_the_clients_own_loop_is_refused(address: str) -> None:
    with Client(address) as client:

        async def inside() -> None:
            client.describe("any")  # would wait on the very loop it blocks

        with pytest.raises(WeftError, match=r"use `client\.aio`"):
            client.run(inside())


@pytest.mark.parametrize(
    ("lists", "concurrency", "pollers", "expected"),
    [
        (["a", "b", "c"], 2, None, "below the number of task lists"),
        (["a", "b"], 3, 2, "4 polls need a concurrency of 4"),
    ],
)
async def test_configurations_that_would_starve_a_task_list_are_refused(
    client: AsyncClient, lists: list[str], concurrency: int, pollers: int | None, expected: str
) -> None:
    @activity
    def noop() -> None: ...

    with pytest.raises(ValueError, match=expected):
        ActivityWorker(
            client, task_lists=lists, activities=[noop], concurrency=concurrency, pollers=pollers
        )


async def test_each_task_list_is_polled_when_concurrency_is_tight(
    client: AsyncClient, task_list: str
) -> None:
    @activity
    def noop() -> None: ...

    lists = [f"{task_list}-a", f"{task_list}-b", f"{task_list}-c"]

    async def polled(name: str) -> bool:
        resp = await client.rpc(
            "DescribeTaskList",
            s.DescribeTaskListRequest(
                namespace="default", task_list=name, kind=c.TASK_LIST_KIND_ACTIVITY
            ),
        )
        return bool(resp.pollers)

    async def all_polled() -> bool:
        return all([await polled(name) for name in lists])

    # Three slots, three lists: each list must have a poll waiting (none may be
    # starved by another list's polls holding every slot).
    async with ActivityWorker(client, task_lists=lists, activities=[noop], concurrency=3):
        await wait_until(all_polled, timeout=15)


async def test_an_activity_past_its_start_to_close_is_stopped_and_frees_its_slot(
    client: AsyncClient, task_list: str
) -> None:
    stopped: list[str] = []

    @activity(name="hangs", start_to_close=timedelta(seconds=1))
    async def hangs() -> None:
        try:
            await asyncio.Event().wait()  # never heartbeats, never returns
        except asyncio.CancelledError:
            stopped.append("hangs")
            raise

    @activity(name="quick")
    def quick() -> str:
        return "ran"

    def decide(task: DecisionTask) -> None:
        first, second = task.activities.get("first"), task.activities.get("second")
        if first is None:
            task.schedule_activity("first", hangs, task_list=task_list)
        elif first.status == "timed_out" and second is None:
            task.schedule_activity("second", quick, task_list=task_list)
        elif second is not None and second.status == "succeeded":
            task.complete(second.result)

    decider = make_decider("hanging", decide)
    async with (
        DeciderWorker(client, task_lists=[task_list], deciders=[decider]),
        # One slot: the second activity runs only if the hung one gave its slot back.
        ActivityWorker(client, task_lists=[task_list], activities=[hangs, quick], concurrency=1),
    ):
        run = await client.start_workflow("hanging", task_list=task_list)
        assert await client.result(run.workflow_id, timeout=WAIT) == "ran"
    assert stopped == ["hangs"]
    timed_out = [e for e in await client.history(run.workflow_id) if e.type == "ActivityTimedOut"]
    assert [e.get("timeout_type") for e in timed_out] == ["START_TO_CLOSE"]

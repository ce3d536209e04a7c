"""End-to-end: `@activity` functions run by an `ActivityWorker` against a real
in-process server, scheduled by a small decider, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import structlog.testing

from orchestrator.engine import activity as engine_activity
from sdk import (
    ActivityCancelledError,
    ActivityWorker,
    AsyncClient,
    DeciderWorker,
    DecisionTask,
    Event,
    NonRetryableError,
    activity,
)
from tests.helpers import wait_until
from tests.sdk.conftest import make_decider, only, truthy, types, wait_for_event

WAIT = timedelta(seconds=20)
SAFETY = 30.0  # a looping test activity gives up after this, so no thread outlives a failure


def run_activities(client: AsyncClient, task_list: str) -> DeciderWorker:
    """A decider for workflow type "run": schedules the activities its input lists
    (`[{"id", "type", "input", "heartbeat"?}]`) on `task_list`, cancels activity
    "a" when signalled "cancel", and completes with every outcome once all closed."""

    def decide(task: DecisionTask) -> None:
        specs = task.input
        if task.is_first:
            for spec in specs:
                beat = spec.get("heartbeat")
                task.schedule_activity(
                    spec["id"],
                    spec["type"],
                    spec.get("input"),
                    task_list=task_list,
                    heartbeat=timedelta(seconds=beat) if beat else None,
                )
            return
        acts = task.activities
        if task.signals("cancel") and "a" in acts and acts["a"].status == "started":
            task.cancel_activity("a")
        if any(a.is_open for a in acts.values()):
            return
        outcome: dict[str, Any] = {}
        for act_id, act in sorted(acts.items()):
            if act.status == "succeeded":
                outcome[act_id] = {"status": act.status, "result": act.result}
            else:
                assert act.failure is not None
                outcome[act_id] = {
                    "status": act.status,
                    "reason": act.failure.reason,
                    "details": act.failure.details,
                    "non_retryable": act.failure.non_retryable,
                }
        task.complete(outcome)

    return DeciderWorker(client, task_lists=[task_list], deciders=[make_decider("run", decide)])


async def start(client: AsyncClient, task_list: str, *specs: dict[str, Any]) -> str:
    run = await client.start_workflow("run", list(specs), task_list=task_list)
    return run.workflow_id


def failed(events: list[Event]) -> Event:
    return only(events, "ActivityFailed")


# -- running ------------------------------------------------------------------------------


@activity
def add_sync(numbers: list[int]) -> dict[str, Any]:
    return {"sum": sum(numbers), "thread": threading.current_thread().name}


@activity(name="greet")
async def greet_async(name: str) -> str:
    await asyncio.sleep(0)
    return f"hello {name}"


async def test_sync_and_async_activities_run(client: AsyncClient, task_list: str) -> None:
    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[add_sync, greet_async]),
    ):
        wid = await start(
            client,
            task_list,
            {"id": "s", "type": "add_sync", "input": [1, 2, 3]},
            {"id": "a", "type": "greet", "input": "ann"},
        )
        result = await client.result(wid, timeout=WAIT)
    assert result["a"] == {"status": "succeeded", "result": "hello ann"}
    assert result["s"]["status"] == "succeeded"
    assert result["s"]["result"]["sum"] == 6
    assert result["s"]["result"]["thread"].startswith("weft-activity")

    events = await client.history(wid)
    scheduled = {e.get("activity_id"): e for e in events if e.type == "ActivityScheduled"}
    assert scheduled["s"].get("activity_type") == {"name": "add_sync"}
    assert scheduled["a"].get("activity_type") == {"name": "greet"}
    successes = {e.get("scheduled_event_id"): e for e in events if e.type == "ActivitySuccess"}
    assert successes[scheduled["a"].event_id].get("result") == "hello ann"
    assert successes[scheduled["s"].event_id].get("result")["sum"] == 6
    started = [e for e in events if e.type == "ActivityStarted"]
    assert [e.get("attempt") for e in started] == [1, 1]
    assert {e.get("identity") for e in started} == {client.identity}


@dataclass
class Item:
    sku: str
    qty: int


@dataclass
class Order:
    id: int
    items: list[Item]
    note: str = ""


@activity
def price(order: Order) -> Order:
    assert isinstance(order, Order)
    assert all(isinstance(item, Item) for item in order.items)
    total = sum(item.qty for item in order.items)
    return Order(order.id, order.items, note=f"{type(order).__name__} with {total} units")


async def test_dataclass_parameter_is_rebuilt_from_json(
    client: AsyncClient, task_list: str
) -> None:
    order = {"id": 9, "items": [{"sku": "A", "qty": 2}, {"sku": "B", "qty": 3}]}
    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[price]),
    ):
        wid = await start(client, task_list, {"id": "p", "type": "price", "input": order})
        result = await client.result(wid, timeout=WAIT)
    assert result["p"] == {
        "status": "succeeded",
        "result": {**order, "note": "Order with 5 units"},
    }


# -- failures -----------------------------------------------------------------------------


@activity
def explode(what: str) -> None:
    raise ValueError(f"cannot handle {what}")


@activity
async def refuse(what: str) -> None:
    raise NonRetryableError(f"never {what}", details={"code": 7})


async def test_exception_fails_the_activity_with_details(
    client: AsyncClient, task_list: str
) -> None:
    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[explode]),
    ):
        wid = await start(client, task_list, {"id": "e", "type": "explode", "input": "this"})
        result = await client.result(wid, timeout=WAIT)
    event = failed(await client.history(wid))
    assert event.get("reason") == "ValueError"
    assert event.get("non_retryable", False) is False
    details = event.get("details")
    assert set(details) == {"type", "message", "traceback"}
    assert details["type"] == "builtins.ValueError"
    assert details["message"] == "cannot handle this"
    trace = details["traceback"]
    assert trace.startswith("Traceback (most recent call last):")
    assert f'File "{__file__}", line' in trace
    assert "in explode" in trace
    assert trace.rstrip().endswith("ValueError: cannot handle this")
    assert result["e"] == {
        "status": "failed",
        "reason": "ValueError",
        "details": details,
        "non_retryable": False,
    }


async def test_sync_failure_traceback_starts_at_the_activity(
    client: AsyncClient, task_list: str
) -> None:
    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[explode]),
    ):
        wid = await start(client, task_list, {"id": "e", "type": "explode", "input": "this"})
        await client.result(wid, timeout=WAIT)
    trace = failed(await client.history(wid)).get("details")["traceback"]
    frames = [line for line in trace.splitlines() if line.startswith('  File "')]
    assert len(frames) == 1, trace
    assert frames[0].startswith(f'  File "{__file__}"')
    assert frames[0].endswith("in explode")


async def test_non_retryable_error(client: AsyncClient, task_list: str) -> None:
    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[refuse]),
    ):
        wid = await start(client, task_list, {"id": "r", "type": "refuse", "input": "that"})
        result = await client.result(wid, timeout=WAIT)
    event = failed(await client.history(wid))
    assert event.get("reason") == "NonRetryableError"
    assert event.get("non_retryable") is True
    assert event.get("details")["type"] == "sdk.errors.NonRetryableError"
    assert event.get("details")["message"] == "never that"
    assert event.get("details")["details"] == {"code": 7}
    # An async activity's traceback starts at the activity: the worker's frames are left out.
    frames = [
        line for line in event.get("details")["traceback"].splitlines() if line.startswith("  File")
    ]
    assert len(frames) == 1
    assert frames[0].startswith(f'  File "{__file__}"')
    assert frames[0].endswith("in refuse")
    assert result["r"]["non_retryable"] is True
    assert result["r"]["reason"] == "NonRetryableError"


async def test_unknown_activity_type(client: AsyncClient, task_list: str) -> None:
    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[explode]),
    ):
        wid = await start(client, task_list, {"id": "u", "type": "no_such_activity"})
        result = await client.result(wid, timeout=WAIT)
    event = failed(await client.history(wid))
    assert event.get("reason") == "ActivityTypeNotRegistered"
    assert "no_such_activity" in event.get("details")["message"]
    assert result["u"]["status"] == "failed"
    assert "ActivityTimedOut" not in types(await client.history(wid))


@activity
def huge() -> str:
    return "x" * (300 * 1024)


async def test_result_over_the_payload_limit_fails_at_once(
    client: AsyncClient, task_list: str
) -> None:
    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[huge]),
    ):
        wid = await start(client, task_list, {"id": "h", "type": "huge"})
        began = time.monotonic()
        result = await client.result(wid, timeout=WAIT)
        assert time.monotonic() - began < 10  # not the 5 min start-to-close timeout
    events = await client.history(wid)
    event = failed(events)
    assert event.get("reason") == "PayloadTooLarge"
    assert "payload" in event.get("details")["message"]
    assert "ActivitySuccess" not in types(events)
    assert "ActivityTimedOut" not in types(events)
    assert result["h"]["reason"] == "PayloadTooLarge"


# -- inside a running activity ------------------------------------------------------------


@activity
def whoami() -> dict[str, Any]:
    info = activity.info()
    return {
        "workflow_id": info.workflow_id,
        "run_id": info.run_id,
        "activity_id": info.activity_id,
        "activity_type": info.activity_type,
        "task_list": info.task_list,
        "attempt": info.attempt,
        "heartbeat": info.heartbeat.total_seconds() if info.heartbeat else None,
        "start_to_close": info.start_to_close.total_seconds() if info.start_to_close else None,
        "namespace": info.namespace,
        "scheduled_event_id": info.scheduled_event_id,
        "started_event_id": info.started_event_id,
        "has_token": bool(info.task_token),
    }


async def test_activity_info(client: AsyncClient, task_list: str) -> None:
    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[whoami]),
    ):
        run_wid = await start(client, task_list, {"id": "w", "type": "whoami", "heartbeat": 7})
        result = await client.result(run_wid, timeout=WAIT)
    events = await client.history(run_wid)
    run_id = (await client.describe(run_wid)).info.run_id
    assert result["w"]["result"] == {
        "workflow_id": run_wid,
        "run_id": run_id,
        "activity_id": "w",
        "activity_type": "whoami",
        "task_list": task_list,
        "attempt": 1,
        "heartbeat": 7.0,
        "start_to_close": 300.0,
        "namespace": "default",
        "scheduled_event_id": only(events, "ActivityScheduled").event_id,
        "started_event_id": only(events, "ActivityStarted").event_id,
        "has_token": True,
    }


async def test_outside_an_activity_info_raises() -> None:
    from sdk import WeftError

    with pytest.raises(WeftError, match="not inside a running activity"):
        activity.info()


async def test_heartbeat_details_show_in_describe(client: AsyncClient, task_list: str) -> None:
    release = asyncio.Event()

    @activity
    async def beating() -> str:
        activity.heartbeat({"step": 1, "of": 3})
        await release.wait()
        return "done"

    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[beating]),
    ):
        wid = await start(client, task_list, {"id": "b", "type": "beating", "heartbeat": 10})

        async def beat_seen() -> Any:
            pending = (await client.describe(wid)).pending_activities
            return pending if pending and pending[0].heartbeat_details else None

        [pending] = await wait_until(beat_seen)
        assert pending.activity_id == "b"
        assert pending.activity_type == "beating"
        assert pending.heartbeat_details == {"step": 1, "of": 3}
        assert pending.last_heartbeat_time is not None
        assert pending.identity == client.identity
        assert pending.started_event_id > pending.scheduled_event_id > 0
        release.set()
        result = await client.result(wid, timeout=WAIT)
    assert result["b"] == {"status": "succeeded", "result": "done"}
    # Heartbeats are not history events.
    assert types(await client.history(wid)).count("ActivityStarted") == 1
    assert not any("Heartbeat" in kind for kind in types(await client.history(wid)))


async def test_heartbeats_whose_details_the_run_refuses_still_keep_tasks_alive(
    client: AsyncClient, task_list: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's pending activities hold a bounded total of heartbeat details:
    past it, a heartbeat's details are refused, and the worker sends it again
    without them, so the activity is not timed out while it runs. (The bound is
    made small here, in the in-process server, so that the test writes little.)"""
    monkeypatch.setattr(engine_activity, "HEARTBEAT_DETAILS_PER_RUN", 10_000)
    beats = 5  # (details of 3,000 characters: three fit)

    @activity
    async def big_beats() -> str:
        for _ in range(10):
            activity.heartbeat("x" * 3_000)
            await asyncio.sleep(0.3)
        return "done"

    with structlog.testing.capture_logs() as logs:
        async with (
            run_activities(client, task_list),
            ActivityWorker(
                client, task_lists=[task_list], activities=[big_beats], concurrency=beats
            ),
        ):
            specs = [{"id": f"b{i}", "type": "big_beats", "heartbeat": 1.5} for i in range(beats)]
            wid = await start(client, task_list, *specs)
            result = await client.result(wid, timeout=WAIT)
    assert result == {f"b{i}": {"status": "succeeded", "result": "done"} for i in range(beats)}
    assert any(entry["event"] == "activity.heartbeat_details_refused" for entry in logs)


# -- cancellation -------------------------------------------------------------------------


async def test_cancel_async_activity(client: AsyncClient, task_list: str) -> None:
    running = asyncio.Event()
    saw: list[str] = []

    @activity
    async def looping() -> str:
        running.set()
        deadline = time.monotonic() + SAFETY
        try:
            while time.monotonic() < deadline:
                activity.heartbeat({"alive": True})
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            saw.append("CancelledError")
            raise
        return "not cancelled"

    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[looping]),
    ):
        wid = await start(client, task_list, {"id": "a", "type": "looping", "heartbeat": 1.5})
        await asyncio.wait_for(running.wait(), 15)
        await wait_for_event(client, wid, "ActivityStarted")
        await client.signal(wid, "cancel")
        result = await client.result(wid, timeout=WAIT)

    assert saw == ["CancelledError"]
    assert result["a"]["status"] == "canceled"
    events = await client.history(wid)
    requested = only(events, "ActivityCancelRequested")
    canceled = only(events, "ActivityCanceled")
    assert requested.get("activity_id") == "a"
    assert canceled.event_id > requested.event_id
    assert canceled.get("scheduled_event_id") == only(events, "ActivityScheduled").event_id
    assert "ActivitySuccess" not in types(events)
    assert "ActivityFailed" not in types(events)


@pytest.mark.parametrize("then", ["raise", "return"])
async def test_cancel_sync_activity(client: AsyncClient, task_list: str, then: str) -> None:
    """A sync activity sees `activity.is_cancelled()` turn True; raising
    `ActivityCancelledError` then reports it canceled, returning completes it."""
    running = threading.Event()
    saw: list[bool] = []

    @activity
    def blocking(then: str) -> str:
        running.set()
        saw.append(activity.is_cancelled())
        ctx = activity.context()
        deadline = time.monotonic() + SAFETY
        while time.monotonic() < deadline:
            activity.heartbeat("working")
            if ctx.wait_cancelled(0.05):
                break
        saw.append(activity.is_cancelled())
        if activity.is_cancelled() and then == "raise":
            raise ActivityCancelledError("stopping as asked")
        return "stopped early"

    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[blocking]),
    ):
        wid = await start(
            client, task_list, {"id": "a", "type": "blocking", "input": then, "heartbeat": 1.5}
        )
        await wait_until(lambda: truthy(running.is_set()))
        await wait_for_event(client, wid, "ActivityStarted")
        await client.signal(wid, "cancel")
        result = await client.result(wid, timeout=WAIT)

    assert saw == [False, True]
    events = await client.history(wid)
    requested = only(events, "ActivityCancelRequested")
    if then == "raise":
        assert result["a"]["status"] == "canceled"
        assert only(events, "ActivityCanceled").event_id > requested.event_id
        assert "ActivitySuccess" not in types(events)
    else:
        assert result["a"] == {"status": "succeeded", "result": "stopped early"}
        assert only(events, "ActivitySuccess").event_id > requested.event_id
        assert "ActivityCanceled" not in types(events)
    assert "ActivityFailed" not in types(events)


# -- the worker ----------------------------------------------------------------------------


async def test_concurrency_is_bounded(client: AsyncClient, task_list: str) -> None:
    state = {"running": 0, "peak": 0, "started": 0}
    done = asyncio.Semaphore(0)

    @activity
    async def slot(n: int) -> int:
        state["running"] += 1
        state["started"] += 1
        state["peak"] = max(state["peak"], state["running"])
        try:
            await done.acquire()
        finally:
            state["running"] -= 1
        return n

    async def started(n: int) -> bool:
        return state["started"] == n and state["running"] == 2

    specs = [{"id": f"a{i}", "type": "slot", "input": i} for i in range(4)]
    async with (
        run_activities(client, task_list),
        ActivityWorker(client, task_lists=[task_list], activities=[slot], concurrency=2),
    ):
        wid = await start(client, task_list, *specs)
        await wait_until(lambda: started(2))
        described = await client.describe(wid)
        states = sorted(a.state for a in described.pending_activities)
        assert states == ["scheduled", "scheduled", "started", "started"]
        for n in (3, 4):
            done.release()  # one finishes: one more may start
            await wait_until(lambda n=n: started(n))  # type: ignore[misc]
            assert state["running"] == 2
        done.release()
        done.release()
        result = await client.result(wid, timeout=WAIT)

    assert state == {"running": 0, "peak": 2, "started": 4}
    assert {k: v["result"] for k, v in result.items()} == {"a0": 0, "a1": 1, "a2": 2, "a3": 3}
    assert types(await client.history(wid)).count("ActivitySuccess") == 4


async def test_graceful_shutdown_lets_running_activity_finish(
    client: AsyncClient, task_list: str
) -> None:
    running = asyncio.Event()

    @activity
    async def steady() -> str:
        running.set()
        await asyncio.sleep(0.5)  # the activity's own work, outlasting the shutdown call
        return "finished"

    async with run_activities(client, task_list):
        worker = ActivityWorker(
            client, task_lists=[task_list], activities=[steady], grace=timedelta(seconds=10)
        )
        async with worker:
            wid = await start(client, task_list, {"id": "g", "type": "steady"})
            await asyncio.wait_for(running.wait(), 15)
        # Leaving the block shut the worker down, after the activity finished.
        assert worker.abandoned == 0
        result = await client.result(wid, timeout=WAIT)
    assert result["g"] == {"status": "succeeded", "result": "finished"}
    events = await client.history(wid)
    assert only(events, "ActivitySuccess").get("result") == "finished"
    assert "ActivityFailed" not in types(events)


async def test_shutdown_past_the_grace_fails_with_worker_shutdown(
    client: AsyncClient, task_list: str
) -> None:
    running = asyncio.Event()
    saw: list[str] = []

    @activity
    async def slow() -> str:
        running.set()
        try:
            await asyncio.sleep(SAFETY)
        except asyncio.CancelledError:
            saw.append("CancelledError")
            raise
        return "finished"

    async with run_activities(client, task_list):
        worker = ActivityWorker(
            client, task_lists=[task_list], activities=[slow], grace=timedelta(milliseconds=200)
        )
        began = time.monotonic()
        async with worker:
            wid = await start(client, task_list, {"id": "s", "type": "slow"})
            await asyncio.wait_for(running.wait(), 15)
        assert time.monotonic() - began < 10
        assert worker.abandoned == 1
        result = await client.result(wid, timeout=WAIT)
    assert saw == ["CancelledError"]
    assert result["s"]["status"] == "failed"
    assert result["s"]["reason"] == "WorkerShutdown"
    event = failed(await client.history(wid))
    assert event.get("reason") == "WorkerShutdown"
    assert event.get("details")["message"] == "the worker shut down"

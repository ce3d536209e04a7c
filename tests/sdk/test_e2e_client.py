"""End-to-end: the SDK clients (`AsyncClient`, and the sync `Client`) against a
real in-process server, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from sdk import (
    ActivityWorker,
    AlreadyExistsError,
    AsyncClient,
    Client,
    DeadlineExceededError,
    DeciderWorker,
    DecisionTask,
    Event,
    InvalidArgumentError,
    NotFoundError,
    WorkflowCanceledError,
    WorkflowFailedError,
    WorkflowTerminatedError,
    WorkflowTimedOutError,
    activity,
)
from tests.helpers import unique, wait_until
from tests.sdk.conftest import make_decider, only, truthy, types, wait_for_event

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
BIG = "x" * (300 * 1024)  # over the 256 KiB payload limit


# -- starting -----------------------------------------------------------------------------


async def test_start_workflow_ids_and_first_events(client: AsyncClient, task_list: str) -> None:
    run = await client.start_workflow(
        "order",
        input={"order": 7},
        task_list=task_list,
        execution_timeout=timedelta(hours=1),
        decider_timeout=timedelta(seconds=20),
    )
    assert re.fullmatch(f"order-{UUID}", run.workflow_id), run.workflow_id
    assert re.fullmatch(UUID, run.run_id), run.run_id
    assert run.started is True

    named = await client.start_workflow("order", workflow_id="order-named", task_list=task_list)
    assert named.workflow_id == "order-named"
    assert named.run_id != run.run_id

    events = await client.history(run.workflow_id)
    assert types(events) == ["WorkflowStarted", "DeciderScheduled"]
    assert [e.event_id for e in events] == [1, 2]
    started = events[0]
    assert started.attributes == {
        "workflow_type": {"name": "order"},
        "task_list": task_list,
        "input": {"order": 7},
        "execution_timeout": 3600.0,
        "decider_timeout": 20.0,
        "identity": "e2e-client",
    }
    assert events[1].attributes == {"task_list": task_list, "start_to_close_timeout": 20.0}
    # The history of an explicit run id is the same run's.
    assert await client.history(run.workflow_id, run_id=run.run_id) == events


async def test_start_same_request_id_returns_the_same_run(
    client: AsyncClient, task_list: str
) -> None:
    first = await client.start_workflow(
        "order", workflow_id="order-1", task_list=task_list, request_id="req-1"
    )
    again = await client.start_workflow(
        "order", workflow_id="order-1", task_list=task_list, request_id="req-1"
    )
    assert again.run_id == first.run_id
    assert types(await client.history("order-1")) == ["WorkflowStarted", "DeciderScheduled"]

    with pytest.raises(AlreadyExistsError) as caught:
        await client.start_workflow("order", workflow_id="order-1", task_list=task_list)
    assert caught.value.status == grpc.StatusCode.ALREADY_EXISTS
    assert types(await client.history("order-1")) == ["WorkflowStarted", "DeciderScheduled"]
    assert [w.run_id for w in await client.list(workflow_id="order-1")] == [first.run_id]


# -- signals ---------------------------------------------------------------------------


async def test_signal_is_deduplicated_by_request_id(client: AsyncClient, task_list: str) -> None:
    run = await client.start_workflow("order", task_list=task_list)
    await client.signal(run.workflow_id, "approved", {"by": "ann"}, request_id="sig-1")
    await client.signal(run.workflow_id, "approved", {"by": "ann"}, request_id="sig-1")
    await client.signal(run.workflow_id, "approved", {"by": "bob"}, run_id=run.run_id)

    events = await client.history(run.workflow_id)
    signals = [e for e in events if e.type == "Signal"]
    assert [s.attributes for s in signals] == [
        {"signal_name": "approved", "input": {"by": "ann"}, "identity": "e2e-client"},
        {"signal_name": "approved", "input": {"by": "bob"}, "identity": "e2e-client"},
    ]
    assert types(events) == ["WorkflowStarted", "DeciderScheduled", "Signal", "Signal"]


async def test_signal_with_start(client: AsyncClient, task_list: str) -> None:
    first = await client.signal_with_start(
        "order", "go", {"n": 1}, workflow_id="order-sws", input={"order": 1}, task_list=task_list
    )
    assert first.started is True
    assert first.workflow_id == "order-sws"
    events = await client.history("order-sws")
    assert types(events) == ["WorkflowStarted", "Signal", "DeciderScheduled"]
    assert events[0].get("input") == {"order": 1}
    assert events[1].attributes["signal_name"] == "go"
    assert events[1].attributes["input"] == {"n": 1}

    second = await client.signal_with_start(
        "order", "go", {"n": 2}, workflow_id="order-sws", input={"order": 2}, task_list=task_list
    )
    assert second.started is False
    assert second.run_id == first.run_id
    events = await client.history("order-sws")
    assert types(events) == ["WorkflowStarted", "Signal", "DeciderScheduled", "Signal"]
    assert [e.get("input") for e in events if e.type == "Signal"] == [{"n": 1}, {"n": 2}]
    assert len(await client.list(workflow_id="order-sws")) == 1

    # Once the run is closed, signal-with-start starts a new one.
    await client.terminate("order-sws")
    third = await client.signal_with_start(
        "order", "go", {"n": 3}, workflow_id="order-sws", task_list=task_list
    )
    assert third.started is True
    assert third.run_id != first.run_id
    assert types(await client.history("order-sws")) == [
        "WorkflowStarted",
        "Signal",
        "DeciderScheduled",
    ]
    assert [w.run_id for w in await client.list(workflow_id="order-sws", status="open")] == [
        third.run_id
    ]


# -- cancel, terminate, describe --------------------------------------------------------


async def test_cancel_closes_through_the_decider(client: AsyncClient, task_list: str) -> None:
    def decide(task: DecisionTask) -> None:
        if task.cancel_requested:
            task.cancel({"cleaned_up": True})

    run = await client.start_workflow("order", task_list=task_list)
    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("order", decide)]
    ):
        await wait_for_event(client, run.workflow_id, "DeciderCompleted")
        await client.cancel(run.workflow_id, reason="customer asked")
        with pytest.raises(WorkflowCanceledError) as caught:
            await client.result(run.workflow_id, timeout=timedelta(seconds=15))
    assert caught.value.workflow_id == run.workflow_id
    assert caught.value.run_id == run.run_id
    assert caught.value.details == {"cleaned_up": True}

    events = await client.history(run.workflow_id)
    requested = only(events, "WorkflowCancelRequested")
    assert requested.attributes == {"reason": "customer asked", "identity": "e2e-client"}
    assert events[-1].type == "WorkflowCanceled"
    assert events[-1].get("details") == {"cleaned_up": True}
    assert events.index(requested) < len(events) - 1
    assert (await client.describe(run.workflow_id)).status == "canceled"


async def test_terminate(client: AsyncClient, task_list: str) -> None:
    run = await client.start_workflow("order", task_list=task_list)
    await client.terminate(run.workflow_id, reason="operator stop", details={"ticket": 42})

    with pytest.raises(WorkflowTerminatedError) as caught:
        await client.result(run.workflow_id, timeout=timedelta(seconds=5))
    assert caught.value.reason == "operator stop"
    assert caught.value.details == {"ticket": 42}
    assert caught.value.run_id == run.run_id

    events = await client.history(run.workflow_id)
    assert types(events) == ["WorkflowStarted", "DeciderScheduled", "WorkflowTerminated"]
    assert events[-1].attributes == {
        "reason": "operator stop",
        "details": {"ticket": 42},
        "identity": "e2e-client",
    }
    described = await client.describe(run.workflow_id)
    assert described.status == "terminated"
    assert described.info.close_time is not None


async def test_describe_pending_activities_and_timers(client: AsyncClient, task_list: str) -> None:
    nobody = unique("nobody")  # no runner polls it: the activity stays scheduled

    def decide(task: DecisionTask) -> None:
        if task.is_first:
            task.schedule_activity("a1", "resize", {"w": 10}, task_list=nobody)
            task.start_timer("t1", timedelta(hours=1))

    run = await client.start_workflow(
        "order", task_list=task_list, decider_timeout=timedelta(seconds=7)
    )
    before = datetime.now(UTC)
    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("order", decide)]
    ):
        events = await wait_for_event(client, run.workflow_id, "TimerScheduled")

    described = await client.describe(run.workflow_id)
    assert described.status == "open"
    assert described.info.workflow_id == run.workflow_id
    assert described.info.run_id == run.run_id
    assert described.info.workflow_type == "order"
    assert described.info.task_list == task_list
    assert described.info.close_time is None
    assert described.info.history_length == len(events) == 6
    assert described.decider_timeout == timedelta(seconds=7)
    assert described.execution_timeout == timedelta(days=365)
    assert described.cancel_requested is False

    [act] = described.pending_activities
    scheduled = only(events, "ActivityScheduled")
    assert act.activity_id == "a1"
    assert act.activity_type == "resize"
    assert act.task_list == nobody
    assert act.scheduled_event_id == scheduled.event_id
    assert act.started_event_id == 0
    assert act.heartbeat_details is None
    assert act.state == "scheduled"
    assert described.decider_state == "none"

    [timer] = described.pending_timers
    assert timer.timer_id == "t1"
    assert timer.started_event_id == only(events, "TimerScheduled").event_id
    assert timer.fire_time is not None
    fires_in = timer.fire_time - before
    assert timedelta(minutes=59) < fires_in < timedelta(minutes=61)

    await client.cancel(run.workflow_id)
    assert (await client.describe(run.workflow_id)).cancel_requested is True


# -- reading histories -------------------------------------------------------------------


async def test_history_and_follow(client: AsyncClient, task_list: str) -> None:
    run = await client.start_workflow("order", task_list=task_list)
    seen: list[Event] = []

    async def follow() -> None:
        async for event in client.iter_history(run.workflow_id, follow=True):
            seen.append(event)

    follower = asyncio.create_task(follow())
    try:
        await wait_until(lambda: truthy(len(seen) >= 2))
        await client.signal(run.workflow_id, "poke", 1)
        await wait_until(lambda: truthy(len(seen) >= 3))
        assert seen[2].type == "Signal"
        assert not follower.done()
        await client.terminate(run.workflow_id, reason="done")
        await asyncio.wait_for(follower, 10)
    finally:
        follower.cancel()

    events = await client.history(run.workflow_id)
    assert seen == events
    assert types(events) == ["WorkflowStarted", "DeciderScheduled", "Signal", "WorkflowTerminated"]
    # Without follow, the iterator ends at the last event; small pages change nothing.
    paged = [e async for e in client.iter_history(run.workflow_id, page_size=1)]
    assert paged == events
    # Following a closed run gives its events and ends.
    closed = client.iter_history(run.workflow_id, follow=True)
    assert await asyncio.wait_for(_collect(closed), 10) == events


async def test_list_by_status_type_and_limit(client: AsyncClient, task_list: str) -> None:
    orders = [
        await client.start_workflow("order", workflow_id=f"order-{i}", task_list=task_list)
        for i in range(3)
    ]
    refund = await client.start_workflow("refund", workflow_id="refund-0", task_list=task_list)
    await client.terminate("order-1", reason="stop")

    open_runs = await client.list(status="open")
    assert sorted(w.workflow_id for w in open_runs) == ["order-0", "order-2", "refund-0"]
    assert {w.status for w in open_runs} == {"open"}

    [closed] = await client.list(status="closed")
    assert (closed.workflow_id, closed.run_id) == ("order-1", orders[1].run_id)
    assert closed.status == "terminated"
    assert closed.close_time is not None
    assert closed.history_length == 3

    [only_refund] = await client.list(workflow_type="refund")
    assert (only_refund.workflow_id, only_refund.run_id) == ("refund-0", refund.run_id)
    assert only_refund.workflow_type == "refund"
    assert only_refund.task_list == task_list

    every = await client.list()
    assert len(every) == 4
    starts = [w.start_time for w in every]
    assert all(t is not None for t in starts)
    assert starts == sorted(starts, reverse=True)  # type: ignore[type-var]  # newest first
    limited = await client.list(limit=2)
    assert [w.run_id for w in limited] == [w.run_id for w in every[:2]]
    assert len(await client.list(status="open", workflow_type="order", limit=1)) == 1
    assert await client.list(workflow_type="nothing-of-this-type") == []
    with pytest.raises(ValueError, match="status"):
        await client.list(status="running")  # type: ignore[arg-type]


# -- results --------------------------------------------------------------------------


async def test_result_returns_the_result(client: AsyncClient, task_list: str) -> None:
    def decide(task: DecisionTask) -> None:
        task.complete({"total": task.input["n"] * 2})

    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("order", decide)]
    ):
        run = await client.start_workflow("order", {"n": 21}, task_list=task_list)
        assert await client.result(run.workflow_id, timeout=timedelta(seconds=15)) == {"total": 42}
    events = await client.history(run.workflow_id)
    assert types(events) == [
        "WorkflowStarted",
        "DeciderScheduled",
        "DeciderStarted",
        "DeciderCompleted",
        "WorkflowSuccess",
    ]
    assert events[-1].attributes == {"result": {"total": 42}, "decider_completed_event_id": 4}
    # A closed run's result is read again at once.
    assert await client.result(run.workflow_id, run_id=run.run_id) == {"total": 42}
    assert (await client.describe(run.workflow_id)).status == "completed"


async def test_result_raises_workflow_failed(client: AsyncClient, task_list: str) -> None:
    def decide(task: DecisionTask) -> None:
        task.fail("OutOfStock", {"sku": "X-1", "wanted": 3})

    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("order", decide)]
    ):
        run = await client.start_workflow("order", task_list=task_list)
        with pytest.raises(WorkflowFailedError) as caught:
            await client.result(run.workflow_id, timeout=timedelta(seconds=15))
    err = caught.value
    assert (err.workflow_id, err.run_id) == (run.workflow_id, run.run_id)
    assert err.reason == "OutOfStock"
    assert err.details == {"sku": "X-1", "wanted": 3}
    assert "OutOfStock" in str(err)
    assert err.status is None
    events = await client.history(run.workflow_id)
    assert events[-1].type == "WorkflowFailed"
    assert events[-1].attributes == {
        "reason": "OutOfStock",
        "details": {"sku": "X-1", "wanted": 3},
        "decider_completed_event_id": 4,
    }


async def test_result_raises_workflow_timed_out(client: AsyncClient, task_list: str) -> None:
    run = await client.start_workflow(
        "order", task_list=task_list, execution_timeout=timedelta(milliseconds=500)
    )
    with pytest.raises(WorkflowTimedOutError) as caught:
        await client.result(run.workflow_id, timeout=timedelta(seconds=15))
    assert caught.value.reason == "START_TO_CLOSE"
    assert caught.value.run_id == run.run_id
    events = await client.history(run.workflow_id)
    assert types(events) == ["WorkflowStarted", "DeciderScheduled", "WorkflowTimedOut"]
    assert events[-1].attributes == {"timeout_type": "START_TO_CLOSE"}
    assert (await client.describe(run.workflow_id)).status == "timed_out"


async def test_result_raises_deadline_exceeded(client: AsyncClient, task_list: str) -> None:
    run = await client.start_workflow("order", task_list=task_list)
    with pytest.raises(DeadlineExceededError) as caught:
        await client.result(run.workflow_id, timeout=timedelta(milliseconds=300))
    assert caught.value.status == grpc.StatusCode.DEADLINE_EXCEEDED
    assert run.workflow_id in caught.value.message
    # Waiting changed nothing.
    assert types(await client.history(run.workflow_id)) == ["WorkflowStarted", "DeciderScheduled"]
    assert (await client.describe(run.workflow_id)).status == "open"


async def test_result_follows_continue_as_new(client: AsyncClient, task_list: str) -> None:
    def decide(task: DecisionTask) -> None:
        n = task.input["n"]
        if n < 2:
            task.continue_as_new({"n": n + 1})
        else:
            task.complete({"final": n})

    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("order", decide)]
    ):
        first = await client.start_workflow("order", {"n": 0}, task_list=task_list)
        result = await client.result(
            first.workflow_id, run_id=first.run_id, timeout=timedelta(seconds=20)
        )
    assert result == {"final": 2}

    runs = await client.list(workflow_id=first.workflow_id)
    assert [w.status for w in runs] == ["completed", "continued_as_new", "continued_as_new"]
    assert runs[-1].run_id == first.run_id
    # Each run links the next.
    for older, newer in zip(reversed(runs), list(reversed(runs))[1:], strict=False):
        history = await client.history(first.workflow_id, run_id=older.run_id)
        assert history[-1].type == "WorkflowContinuedAsNew"
        assert history[-1].get("new_run_id") == newer.run_id
        assert newer.continued_from_run_id == older.run_id
        started = (await client.history(first.workflow_id, run_id=newer.run_id))[0]
        assert started.get("continued_from_run_id") == older.run_id
    last = await client.history(first.workflow_id)
    assert last[0].get("input") == {"n": 2}
    assert last[-1].type == "WorkflowSuccess"


# -- errors -----------------------------------------------------------------------------


async def test_unknown_workflow_ids_raise_not_found(client: AsyncClient) -> None:
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: client.history("no-such-workflow"),
        lambda: client.describe("no-such-workflow"),
        lambda: client.signal("no-such-workflow", "x"),
        lambda: client.cancel("no-such-workflow"),
        lambda: client.terminate("no-such-workflow"),
        lambda: client.result("no-such-workflow", timeout=timedelta(seconds=5)),
    ]
    for call in calls:
        with pytest.raises(NotFoundError) as caught:
            await call()
        assert caught.value.status == grpc.StatusCode.NOT_FOUND


async def test_payload_over_the_limit_is_invalid_and_changes_nothing(
    client: AsyncClient, task_list: str
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await client.start_workflow("order", {"blob": BIG}, workflow_id="big", task_list=task_list)
    assert caught.value.status == grpc.StatusCode.INVALID_ARGUMENT
    assert "payload" in caught.value.message
    assert await client.list() == []
    with pytest.raises(NotFoundError):
        await client.history("big")

    run = await client.start_workflow("order", workflow_id="small", task_list=task_list)
    before = await client.history(run.workflow_id)
    with pytest.raises(InvalidArgumentError):
        await client.signal(run.workflow_id, "data", BIG)
    with pytest.raises(InvalidArgumentError):
        await client.terminate(run.workflow_id, details=BIG)
    assert await client.history(run.workflow_id) == before
    assert (await client.describe(run.workflow_id)).status == "open"


# -- the sync client -----------------------------------------------------------------------


async def test_sync_client(client: AsyncClient, address: str, task_list: str) -> None:
    """The blocking `Client`, used from a plain thread while the test's loop serves."""

    def decide(task: DecisionTask) -> None:
        approvals = task.signals("approve")
        if approvals:
            task.complete({"input": task.input, "approved_by": approvals[0].input})

    def use_sync_client() -> tuple[str, object, list[Event], list[Event], list[Event]]:
        with Client(address, identity="sync-client") as sync:
            assert threading.current_thread() is not sync._thread
            run = sync.start_workflow("order", {"n": 1}, task_list=task_list)
            with pytest.raises(AlreadyExistsError):
                sync.start_workflow("order", workflow_id=run.workflow_id, task_list=task_list)
            followed: list[Event] = []
            follower = threading.Thread(
                target=lambda: followed.extend(sync.iter_history(run.workflow_id, follow=True))
            )
            follower.start()
            sync.signal(run.workflow_id, "approve", "ann", request_id="once")
            sync.signal(run.workflow_id, "approve", "ann", request_id="once")
            result = sync.result(run.workflow_id, timeout=timedelta(seconds=15))
            follower.join(10)
            assert not follower.is_alive()
            history = sync.history(run.workflow_id)
            plain = list(sync.iter_history(run.workflow_id))
            return run.workflow_id, result, history, plain, followed

    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("order", decide)]
    ):
        workflow_id, result, history, plain, followed = await asyncio.to_thread(use_sync_client)

    assert result == {"input": {"n": 1}, "approved_by": "ann"}
    assert history == await client.history(workflow_id)
    assert plain == history
    assert followed == history
    assert history[0].get("identity") == "sync-client"
    assert [e.get("input") for e in history if e.type == "Signal"] == ["ann"]
    assert history[-1].type == "WorkflowSuccess"


async def test_sync_client_runs_workers_in_with_blocks(address: str, task_list: str) -> None:
    """`with ActivityWorker(Client)` / `with DeciderWorker(Client)`: workers on the
    sync client's own loop, from a thread with no event loop."""

    @activity
    def double(n: int) -> int:
        return n * 2

    def decide(task: DecisionTask) -> None:
        act = task.activities.get("d")
        if act is None:
            task.schedule_activity("d", double, task.input, task_list=task_list)
        elif act.status == "succeeded":
            task.complete(act.result)

    def use() -> tuple[object, list[str], int]:
        with Client(address) as sync:
            deciders = DeciderWorker(
                sync, task_lists=[task_list], deciders=[make_decider("double", decide)]
            )
            runner = ActivityWorker(sync, task_lists=[task_list], activities=[double])
            with deciders, runner:
                run = sync.start_workflow("double", 21, task_list=task_list)
                result = sync.result(run.workflow_id, timeout=timedelta(seconds=15))
            with pytest.raises(TypeError, match="async with"):
                DeciderWorker(
                    sync.aio, task_lists=[task_list], deciders=[make_decider("x", decide)]
                ).__enter__()
            return result, types(sync.history(run.workflow_id)), runner.abandoned

    result, kinds, abandoned = await asyncio.to_thread(use)
    assert result == 42
    assert kinds[-1] == "WorkflowSuccess"
    assert kinds.count("ActivitySuccess") == 1
    assert abandoned == 0


async def _collect(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]

"""End-to-end: `Decider`s run by a `DeciderWorker` against a real in-process
server, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, ClassVar

import pytest

from sdk import (
    ActivityWorker,
    AsyncClient,
    Decider,
    DeciderWorker,
    DecisionTask,
    Marker,
    activity,
)
from tests.helpers import unique, wait_until
from tests.sdk.conftest import make_decider, only, types, wait_for_event

WAIT = timedelta(seconds=20)


@activity
async def shout(text: str) -> str:
    return text.upper()


class Shouter(Decider):
    """A decider whose `decide` is a coroutine."""

    workflow_type = "shouter"
    calls: ClassVar[list[int]] = []

    async def decide(self, task: DecisionTask) -> None:
        await asyncio.sleep(0)  # really awaited on the worker's loop
        self.calls.append(task.started_event_id)
        act = task.activities.get("s")
        if act is None:
            task.schedule_activity("s", shout, task.input["text"], task_list=task.input["tl"])
        elif act.status == "succeeded":
            task.complete({"shouted": act.result, "attempts": act.attempts})


async def test_async_decider_runs_a_workflow(client: AsyncClient, task_list: str) -> None:
    Shouter.calls.clear()
    async with (
        DeciderWorker(client, task_lists=[task_list], deciders=[Shouter()]),
        ActivityWorker(client, task_lists=[task_list], activities=[shout]),
    ):
        run = await client.start_workflow(
            "shouter", {"text": "hey", "tl": task_list}, task_list=task_list
        )
        result = await client.result(run.workflow_id, timeout=WAIT)
    assert result == {"shouted": "HEY", "attempts": 1}
    events = await client.history(run.workflow_id)
    assert types(events) == [
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
    assert Shouter.calls == [3, 9]
    assert events[4].attributes["activity_type"] == {"name": "shout"}
    assert events[4].attributes["input"] == "hey"
    assert events[2].get("identity") == client.identity


# -- failing deciders -------------------------------------------------------------------


async def test_raising_decider_is_recorded_once_then_retried_quietly_until_it_recovers(
    client: AsyncClient, task_list: str
) -> None:
    broken = {"on": True}
    attempts: list[tuple[int, int]] = []

    def decide(task: DecisionTask) -> None:
        attempts.append((task.started_event_id, task.attempt))
        if broken["on"]:
            raise RuntimeError("kaboom in decide")
        task.complete("recovered")

    worker = DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("fragile", decide)]
    )
    async with worker:
        run = await client.start_workflow("fragile", task_list=task_list)

        async def parked() -> Any:
            described = await client.describe(run.workflow_id)
            return described if described.decider_attempt >= 4 else None

        described = await wait_until(parked)
        # Failures after the first append nothing: the history is as it was.
        assert types(await client.history(run.workflow_id)) == [
            "WorkflowStarted",
            "DeciderScheduled",
            "DeciderStarted",
            "DeciderFailed",
            "DeciderScheduled",
            "DeciderStarted",
        ]
        assert described.decider_state == "retrying"
        assert described.decider_failure == "DECIDER_EXCEPTION: kaboom in decide"
        broken["on"] = False
        result = await client.result(run.workflow_id, timeout=WAIT)
    assert result == "recovered"

    events = await client.history(run.workflow_id)
    assert types(events) == [
        "WorkflowStarted",
        "DeciderScheduled",
        "DeciderStarted",
        "DeciderFailed",
        "DeciderScheduled",
        "DeciderStarted",
        "DeciderCompleted",
        "WorkflowSuccess",
    ]
    failed = only(events, "DeciderFailed")
    assert failed.get("cause") == "DECIDER_EXCEPTION"
    assert failed.get("scheduled_event_id") == 2
    assert failed.get("started_event_id") == 3
    details = failed.get("details")
    assert details["type"] == "builtins.RuntimeError"
    assert details["message"] == "kaboom in decide"
    assert "RuntimeError: kaboom in decide" in details["traceback"]
    assert events[5].get("attempt") == 2
    # Every attempt was a decide call on the same window; the attempts count up.
    assert attempts[0] == (3, 1)
    assert [a for _, a in attempts[1:]] == list(range(2, len(attempts) + 1))
    assert {started for started, _ in attempts[1:]} == {6}
    completed = only(events, "DeciderCompleted")
    assert completed.get("started_event_id") == 6
    assert (await client.describe(run.workflow_id)).decider_failure == ""


async def test_unknown_workflow_type(client: AsyncClient, task_list: str) -> None:
    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("known", lambda t: t.complete())]
    ):
        run = await client.start_workflow("mystery", task_list=task_list)
        events = await wait_for_event(client, run.workflow_id, "DeciderFailed")
    failed = only(events, "DeciderFailed")
    assert failed.get("cause") == "UNKNOWN_WORKFLOW_TYPE"
    assert "'mystery'" in failed.get("details")["message"]
    assert failed.get("identity") == client.identity
    assert (await client.describe(run.workflow_id)).status == "open"


async def test_refused_decisions_are_recorded_once_then_retried_quietly(
    client: AsyncClient, task_list: str
) -> None:
    def decide(task: DecisionTask) -> None:
        task.complete("x" * (300 * 1024))  # over the payload limit: the server refuses it

    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("oversized", decide)]
    ):
        run = await client.start_workflow("oversized", task_list=task_list)

        async def parked() -> Any:
            described = await client.describe(run.workflow_id)
            return described if described.decider_attempt >= 3 else None

        try:
            described = await wait_until(parked)
        finally:
            await client.terminate(run.workflow_id, reason="test over")
    events = await client.history(run.workflow_id)
    failed = only(events, "DeciderFailed")
    assert failed.get("cause") == "BAD_DECISIONS"
    assert "payload limit" in failed.get("details")["message"]
    assert described.decider_failure.startswith("BAD_DECISIONS: ")
    assert "payload limit" in described.decider_failure
    assert types(events)[-1] == "WorkflowTerminated"
    assert "DeciderTimedOut" not in types(events)


# -- what a decider reads and records ---------------------------------------------------


async def test_timer_then_complete(client: AsyncClient, task_list: str) -> None:
    def decide(task: DecisionTask) -> None:
        timer = task.timers.get("t1")
        if timer is None:
            task.start_timer("t1", timedelta(milliseconds=300))
        elif timer.status == "fired":
            task.complete({"timer": timer.status, "delay": timer.delay})

    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("waiter", decide)]
    ):
        run = await client.start_workflow("waiter", task_list=task_list)
        result = await client.result(run.workflow_id, timeout=WAIT)
    assert result == {"timer": "fired", "delay": 0.3}
    events = await client.history(run.workflow_id)
    assert types(events) == [
        "WorkflowStarted",
        "DeciderScheduled",
        "DeciderStarted",
        "DeciderCompleted",
        "TimerScheduled",
        "TimerExpired",
        "DeciderScheduled",
        "DeciderStarted",
        "DeciderCompleted",
        "WorkflowSuccess",
    ]
    scheduled, expired = events[4], events[5]
    assert scheduled.attributes == {
        "timer_id": "t1",
        "start_to_fire_timeout": 0.3,
        "decider_completed_event_id": 4,
    }
    assert expired.attributes == {"timer_id": "t1", "started_event_id": scheduled.event_id}
    assert expired.timestamp - scheduled.timestamp >= timedelta(milliseconds=300)


async def test_marker_is_seen_on_the_next_task(client: AsyncClient, task_list: str) -> None:
    seen: list[list[Marker]] = []

    def decide(task: DecisionTask) -> None:
        seen.append(task.markers())
        if task.is_first:
            task.record_marker("checkpoint", {"step": 1})
            task.record_marker("other", "x")
            task.start_timer("wake", timedelta(milliseconds=100))  # markers wake no one
        else:
            task.complete([m.details for m in task.markers("checkpoint")])

    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("marking", decide)]
    ):
        run = await client.start_workflow("marking", task_list=task_list)
        result = await client.result(run.workflow_id, timeout=WAIT)
    assert result == [{"step": 1}]
    events = await client.history(run.workflow_id)
    markers = [e for e in events if e.type == "Marker"]
    assert [m.attributes for m in markers] == [
        {"marker_name": "checkpoint", "details": {"step": 1}, "decider_completed_event_id": 4},
        {"marker_name": "other", "details": "x", "decider_completed_event_id": 4},
    ]
    assert seen == [
        [],
        [
            Marker("checkpoint", {"step": 1}, markers[0].event_id),
            Marker("other", "x", markers[1].event_id),
        ],
    ]
    # A Marker does not schedule a decision task: only the timer did.
    assert types(events).count("DeciderScheduled") == 2
    assert events[events.index(markers[1]) + 1].type == "TimerScheduled"


async def test_signals_by_name(client: AsyncClient, task_list: str) -> None:
    def decide(task: DecisionTask) -> None:
        approvals = task.signals("approve")
        if len(approvals) == 2:
            task.complete(
                {
                    "approved_by": [s.input for s in approvals],
                    "all": [s.name for s in task.signals()],
                    "identities": sorted({s.identity for s in approvals}),
                }
            )

    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("approval", decide)]
    ):
        run = await client.start_workflow("approval", task_list=task_list)
        await client.signal(run.workflow_id, "approve", "ann")
        await client.signal(run.workflow_id, "noise", {"ignored": True})
        await client.signal(run.workflow_id, "approve", "bob")
        result = await client.result(run.workflow_id, timeout=WAIT)
    assert result == {
        "approved_by": ["ann", "bob"],
        "all": ["approve", "noise", "approve"],
        "identities": ["e2e-client"],
    }
    events = await client.history(run.workflow_id)
    assert [e.get("signal_name") for e in events if e.type == "Signal"] == [
        "approve",
        "noise",
        "approve",
    ]


async def test_new_events_hold_only_events_after_the_previous_task(
    client: AsyncClient, task_list: str
) -> None:
    tasks: list[dict[str, Any]] = []

    def decide(task: DecisionTask) -> None:
        tasks.append(
            {
                "started": task.started_event_id,
                "previous": task.previous_started_event_id,
                "history": [e.event_id for e in task.history],
                "new": [(e.event_id, e.type) for e in task.new_events],
            }
        )
        if task.is_first:
            task.start_timer("t", timedelta(milliseconds=100))
        elif task.signals("done"):
            task.complete(len(tasks))

    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("steps", decide)]
    ):
        run = await client.start_workflow("steps", task_list=task_list)
        await wait_for_event(client, run.workflow_id, "TimerExpired")
        await wait_until_decided(client, run.workflow_id, 2)
        await client.signal(run.workflow_id, "done")
        assert await client.result(run.workflow_id, timeout=WAIT) == 3

    events = await client.history(run.workflow_id)
    started = [e.event_id for e in events if e.type == "DeciderStarted"]
    assert [t["started"] for t in tasks] == started
    assert [t["previous"] for t in tasks] == [0, *started[:-1]]
    by_id = {e.event_id: e.type for e in events}
    for t in tasks:
        # The task holds the history up to its DeciderStarted ...
        assert t["history"] == list(range(1, t["started"] + 1))
        # ... and new_events exactly those after the previous DeciderStarted.
        expected = [(i, by_id[i]) for i in range(t["previous"] + 1, t["started"] + 1)]
        assert t["new"] == expected
    assert tasks[0]["new"] == [
        (1, "WorkflowStarted"),
        (2, "DeciderScheduled"),
        (3, "DeciderStarted"),
    ]
    assert [kind for _, kind in tasks[1]["new"]] == [
        "DeciderCompleted",
        "TimerScheduled",
        "TimerExpired",
        "DeciderScheduled",
        "DeciderStarted",
    ]
    assert [kind for _, kind in tasks[2]["new"]] == [
        "DeciderCompleted",
        "Signal",
        "DeciderScheduled",
        "DeciderStarted",
    ]


async def wait_until_decided(client: AsyncClient, workflow_id: str, n: int) -> None:
    """Wait until `n` decision tasks were answered."""

    async def check() -> bool:
        return types(await client.history(workflow_id)).count("DeciderCompleted") >= n

    await wait_until(check)


# -- registration -----------------------------------------------------------------------


def count_registrations(client: AsyncClient, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """An event set once the client's `register_workflow_type` call has returned;
    the call first waits a little, as a slow server would."""
    registered = asyncio.Event()
    original = client.register_workflow_type

    async def register(*args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(0.2)  # latency of a busy server, not a wait for a condition
        await original(*args, **kwargs)
        registered.set()

    monkeypatch.setattr(client, "register_workflow_type", register)
    return registered


async def test_register_types_sets_the_default_task_list(
    client: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_list = unique("tl")
    registered = count_registrations(client, monkeypatch)
    decider = make_decider("registered", lambda t: t.complete("ran"), task_list=task_list)
    async with DeciderWorker(client, deciders=[decider], register_types=True) as worker:
        assert worker.task_lists == [task_list]
        await asyncio.wait_for(registered.wait(), 10)
        run = await client.start_workflow("registered")  # no task_list
        result = await client.result(run.workflow_id, timeout=WAIT)
    assert result == "ran"
    started = (await client.history(run.workflow_id))[0]
    assert started.get("task_list") == task_list
    assert started.get("workflow_type") == {"name": "registered"}


async def test_register_types_is_done_when_the_block_is_entered(
    client: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_list = unique("tl")
    registered = count_registrations(client, monkeypatch)
    decider = make_decider("registered", lambda t: t.complete("ran"), task_list=task_list)
    async with DeciderWorker(client, deciders=[decider], register_types=True):
        assert registered.is_set()
        run = await client.start_workflow("registered")
        assert await client.result(run.workflow_id, timeout=WAIT) == "ran"

"""Schedules through AdminService on a real server, on both databases: each
overlap policy, trigger, backfill, pause, describe, and bad input refused
with a clear status and nothing written."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from orchestrator.schedules.spec import jitter_for, slot_text
from orchestrator.server import Server
from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import schedules_pb2 as sc
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import dur, payload, unique, wait_until

OPEN = c.WORKFLOW_STATUS_OPEN
INVALID = grpc.StatusCode.INVALID_ARGUMENT
Stubs = tuple[ag.AdminServiceStub, sg.WorkflowServiceStub]


@pytest.fixture
async def stubs(
    server: Server,
) -> AsyncIterator[tuple[ag.AdminServiceStub, sg.WorkflowServiceStub]]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield ag.AdminServiceStub(channel), sg.WorkflowServiceStub(channel)


def every(name: str, seconds: float = 1, **fields: object) -> sc.CreateScheduleRequest:
    return sc.CreateScheduleRequest(
        schedule=sc.Schedule(
            name=name,
            workflow_type="nightly",
            task_list=unique("tl"),
            every=dur(seconds),
            input=payload({"from": name}),
            **fields,  # type: ignore[arg-type]
        )
    )


async def describe(admin: ag.AdminServiceStub, name: str) -> sc.ScheduleDescription:
    resp = await admin.DescribeSchedule(sc.DescribeScheduleRequest(name=name))
    return resp.description


async def terminate(stub: sg.WorkflowServiceStub, workflow_id: str) -> None:
    await stub.TerminateWorkflow(
        s.TerminateWorkflowRequest(execution=c.WorkflowExecution(workflow_id=workflow_id))
    )


async def test_allow_starts_every_slot_while_others_run(stubs: Stubs) -> None:
    admin, stub = stubs
    name = unique("allow")
    await admin.CreateSchedule(every(name, overlap="allow"))

    async def three() -> sc.ScheduleDescription | None:
        d = await describe(admin, name)
        return d if len(d.recent_runs) >= 3 else None

    d = await wait_until(three, timeout=10)
    assert all(r.status == OPEN for r in d.recent_runs)
    assert d.skipped == 0 and d.missed == 0
    # Each run's workflow id is the schedule and its slot, and it got the input.
    run = d.recent_runs[0]
    slot = run.slot.ToDatetime(UTC)
    assert run.workflow_id == f"{name}/{slot:%Y-%m-%dT%H:%M:%S}Z"
    history = await stub.GetWorkflowHistory(
        s.GetWorkflowHistoryRequest(execution=c.WorkflowExecution(workflow_id=run.workflow_id))
    )
    started = history.events[0].workflow_started
    assert started.workflow_type.name == "nightly"
    assert started.input == payload({"from": name})
    # Slots one second apart, newest first.
    slots = [r.slot.ToDatetime(UTC) for r in d.recent_runs]
    assert all(a - b == timedelta(seconds=1) for a, b in itertools.pairwise(slots))


async def test_skip_starts_nothing_while_its_run_is_open(stubs: Stubs) -> None:
    admin, stub = stubs
    name = unique("skip")
    await admin.CreateSchedule(every(name))  # skip is the default

    d = await wait_until(lambda: _with(admin, name, lambda d: d.skipped >= 2), timeout=10)
    assert len(d.recent_runs) == 1 and d.started == 1
    # Once it closes, the next slot starts.
    await terminate(stub, d.recent_runs[0].workflow_id)
    d = await wait_until(lambda: _with(admin, name, lambda d: d.started == 2), timeout=10)
    assert d.recent_runs[0].status == OPEN


async def test_buffer_one_starts_the_kept_slot_when_the_run_closes(stubs: Stubs) -> None:
    admin, stub = stubs
    name = unique("buffer")
    await admin.CreateSchedule(every(name, overlap="buffer-one"))
    # One run open, one slot kept, the slots after it skipped.
    d = await wait_until(
        lambda: _with(admin, name, lambda d: d.HasField("buffered_slot") and d.skipped >= 1),
        timeout=10,
    )
    assert d.started == 1
    kept = d.buffered_slot.ToDatetime(UTC)
    await terminate(stub, d.recent_runs[0].workflow_id)
    d = await wait_until(lambda: _with(admin, name, lambda d: d.started == 2), timeout=10)
    # The kept slot is the one that started (late), not the latest slot.
    assert d.recent_runs[0].slot.ToDatetime(UTC) == kept
    assert d.recent_runs[1].status == c.WORKFLOW_STATUS_TERMINATED


async def test_cancel_previous_asks_it_to_cancel_and_starts_after_it_closes(
    stubs: Stubs,
) -> None:
    admin, stub = stubs
    name = unique("cancel")
    await admin.CreateSchedule(every(name, overlap="cancel-previous"))
    d = await wait_until(
        lambda: _with(admin, name, lambda d: d.HasField("buffered_slot")), timeout=10
    )
    first = d.recent_runs[0].workflow_id
    described = await stub.DescribeWorkflow(
        s.DescribeWorkflowRequest(execution=c.WorkflowExecution(workflow_id=first))
    )
    assert described.cancel_requested
    assert d.started == 1  # not before the first closes
    await terminate(stub, first)  # (a decider would close it as canceled)
    d = await wait_until(lambda: _with(admin, name, lambda d: d.started >= 2), timeout=10)
    assert d.recent_runs[0].workflow_id != first


async def test_terminate_previous_terminates_and_starts_at_once(stubs: Stubs) -> None:
    admin, _ = stubs
    name = unique("terminate")
    await admin.CreateSchedule(every(name, overlap="terminate-previous"))
    d = await wait_until(lambda: _with(admin, name, lambda d: d.started >= 3), timeout=10)
    statuses = [r.status for r in d.recent_runs]
    assert statuses[0] == OPEN
    assert set(statuses[1:]) == {c.WORKFLOW_STATUS_TERMINATED}
    assert d.skipped == 0


async def test_pause_trigger_backfill_and_describe(stubs: Stubs) -> None:
    admin, stub = stubs
    name = unique("manual")
    await admin.CreateSchedule(
        sc.CreateScheduleRequest(
            schedule=sc.Schedule(
                name=name,
                workflow_type="report",
                task_list="tl",
                cron="0 2 * * *",
                timezone="Europe/Brussels",
                overlap="allow",
                paused=True,
                note="waiting for data",
            )
        )
    )
    d = await describe(admin, name)
    assert d.schedule.paused and d.schedule.note == "waiting for data"
    assert d.schedule.catch_up_window.ToTimedelta() == timedelta(days=365)
    nexts = [t.ToDatetime(UTC) for t in d.next_times]
    assert len(nexts) == 5
    assert all(t.hour in (0, 1) and t.minute == 0 for t in nexts)  # 02:00 in Brussels

    # A trigger starts a run now, even while paused.
    trig = await admin.TriggerSchedule(sc.TriggerScheduleRequest(name=name))
    d = await wait_until(lambda: _with(admin, name, lambda d: d.started == 1), timeout=10)
    assert d.recent_runs[0].workflow_id == trig.workflow_id

    # Backfill three days: three runs, 02:00 local each; again: nothing new.
    start = Timestamp()
    start.FromDatetime(datetime(2026, 3, 27, tzinfo=UTC))
    end = Timestamp()
    end.FromDatetime(datetime(2026, 3, 29, 12, tzinfo=UTC))
    back = await admin.BackfillSchedule(
        sc.BackfillScheduleRequest(name=name, start_time=start, end_time=end)
    )
    assert back.slots == 3
    d = await wait_until(lambda: _with(admin, name, lambda d: d.started == 4), timeout=10)
    ids = {r.workflow_id for r in d.recent_runs}
    assert {
        f"{name}/2026-03-27T01:00:00Z",
        f"{name}/2026-03-28T01:00:00Z",
        f"{name}/2026-03-29T01:00:00Z",  # 02:00 is skipped that night: at 03:00 CEST
    } <= ids
    await admin.BackfillSchedule(
        sc.BackfillScheduleRequest(name=name, start_time=start, end_time=end)
    )
    d = await wait_until(lambda: _with(admin, name, lambda d: d.pending == 0), timeout=10)
    await asyncio.sleep(1.5)
    assert (await describe(admin, name)).started == 4

    await admin.UnpauseSchedule(sc.UnpauseScheduleRequest(name=name, note="go"))
    d = await describe(admin, name)
    assert not d.schedule.paused and d.schedule.note == "go"
    listed = await admin.ListSchedules(sc.ListSchedulesRequest())
    assert name in [x.schedule.name for x in listed.schedules]

    # Update replaces the spec; delete removes the schedule, not its runs.
    update = sc.Schedule()
    update.CopyFrom(d.schedule)
    update.cron, update.timezone = "30 4 * * *", ""
    await admin.UpdateSchedule(sc.UpdateScheduleRequest(schedule=update))
    d = await describe(admin, name)
    assert d.schedule.cron == "30 4 * * *" and d.started == 4
    assert all(t.ToDatetime(UTC).hour == 4 for t in d.next_times)
    await admin.DeleteSchedule(sc.DeleteScheduleRequest(name=name))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await describe(admin, name)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    await stub.DescribeWorkflow(
        s.DescribeWorkflowRequest(execution=c.WorkflowExecution(workflow_id=trig.workflow_id))
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": "61 * * * *"}, "outside 0-59"),
        ({"cron": "* * *"}, "5 fields"),
        ({"cron": "0 2 * * *", "timezone": "Europe/Atlantis"}, "unknown time zone"),
        ({"cron": "0 2 * * *", "every": dur(60)}, "exactly one"),
        ({}, "exactly one"),
        ({"every": dur(0.5)}, "positive|whole seconds"),
        ({"every": dur(60), "overlap": "queue"}, "overlap must be one of"),
        ({"every": dur(60), "jitter": dur(-1)}, "zero or more"),
        ({"every": dur(60), "catch_up_window": dur(-5)}, "zero or more"),
    ],
)
async def test_bad_schedules_are_invalid_argument(
    stubs: Stubs,
    fields: dict[str, object],
    message: str,
) -> None:
    admin, _ = stubs
    name = unique("bad")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await admin.CreateSchedule(
            sc.CreateScheduleRequest(
                schedule=sc.Schedule(name=name, workflow_type="t", **fields)  # type: ignore[arg-type]
            )
        )
    assert err.value.code() == INVALID
    assert err.value.details() and re.search(message, err.value.details())
    listed = await admin.ListSchedules(sc.ListSchedulesRequest())
    assert name not in [x.schedule.name for x in listed.schedules]


async def test_other_bad_calls(stubs: Stubs) -> None:
    admin, _ = stubs
    name = unique("dup")
    start, end = Timestamp(), Timestamp()
    start.FromDatetime(datetime(2026, 1, 2, tzinfo=UTC))
    end.FromDatetime(datetime(2026, 1, 1, tzinfo=UTC))

    async def code(call: object) -> grpc.StatusCode:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call  # type: ignore[misc]
        return err.value.code()

    sched = sc.Schedule(name=name, workflow_type="t", every=dur(3600))
    assert (
        await code(
            admin.CreateSchedule(
                sc.CreateScheduleRequest(
                    schedule=sc.Schedule(
                        name=name, workflow_type="t", every=dur(60), start_at=start, end_at=end
                    )
                )
            )
        )
        == INVALID
    )
    assert (
        await code(
            admin.CreateSchedule(
                sc.CreateScheduleRequest(schedule=sc.Schedule(workflow_type="t", every=dur(60)))
            )
        )
        == INVALID
    )
    await admin.CreateSchedule(sc.CreateScheduleRequest(schedule=sched))
    assert (
        await code(admin.CreateSchedule(sc.CreateScheduleRequest(schedule=sched)))
        == grpc.StatusCode.ALREADY_EXISTS
    )
    missing = unique("missing")
    not_found = grpc.StatusCode.NOT_FOUND
    assert await code(admin.PauseSchedule(sc.PauseScheduleRequest(name=missing))) == not_found
    assert await code(admin.TriggerSchedule(sc.TriggerScheduleRequest(name=missing))) == not_found
    assert await code(admin.DeleteSchedule(sc.DeleteScheduleRequest(name=missing))) == not_found
    assert (
        await code(
            admin.UpdateSchedule(
                sc.UpdateScheduleRequest(
                    schedule=sc.Schedule(name=missing, workflow_type="t", every=dur(60))
                )
            )
        )
        == not_found
    )
    # Backfill: end before start; a range of too many slots.
    assert (
        await code(
            admin.BackfillSchedule(
                sc.BackfillScheduleRequest(name=name, start_time=start, end_time=end)
            )
        )
        == INVALID
    )
    far = Timestamp()
    far.FromDatetime(datetime(2027, 1, 1, tzinfo=UTC))
    assert (
        await code(
            admin.BackfillSchedule(
                sc.BackfillScheduleRequest(name=name, start_time=end, end_time=far)
            )
        )
        == INVALID
    )
    assert (await describe(admin, name)).pending == 0


async def _with(
    admin: ag.AdminServiceStub, name: str, check: Callable[[sc.ScheduleDescription], bool]
) -> sc.ScheduleDescription | None:
    d = await describe(admin, name)
    return d if check(d) else None


async def test_slots_that_come_while_paused_are_not_started(stubs: Stubs) -> None:
    admin, _ = stubs
    name = unique("paused")
    await admin.CreateSchedule(every(name, overlap="allow", paused=True))
    await asyncio.sleep(2.5)
    d = await describe(admin, name)
    assert d.started == 0 and not d.recent_runs and d.missed == 0
    await admin.UnpauseSchedule(sc.UnpauseScheduleRequest(name=name))
    unpaused = datetime.now(UTC)
    d = await wait_until(lambda: _with(admin, name, lambda d: d.started >= 2), timeout=10)
    # Only slots after the unpause: none of the paused seconds is caught up.
    assert all(r.slot.ToDatetime(UTC) > unpaused - timedelta(seconds=1) for r in d.recent_runs)
    await admin.PauseSchedule(sc.PauseScheduleRequest(name=name, note="enough"))
    started = (await describe(admin, name)).started
    await asyncio.sleep(2.5)
    d = await describe(admin, name)
    assert d.started == started and d.schedule.note == "enough"


async def test_an_update_keeps_the_old_slot_waiting_out_its_jitter(stubs: Stubs) -> None:
    """A slot that came under the old spec but waits out its jitter when the spec
    changes still starts (it used to be passed over with the old spec)."""
    admin, stub = stubs
    name, period, jitter = unique("jittered"), 4, timedelta(seconds=3.9)
    await admin.CreateSchedule(every(name, period, overlap="allow", jitter=dur(3.9)))
    now = datetime.now(UTC)
    slot = datetime.fromtimestamp((now.timestamp() // period + 1) * period, UTC)
    for _ in range(20):
        # A slot whose start its jitter puts at least 1.5 s after it; the update
        # must land at least 0.5 s before that start, which the runner never
        # comes before. On a machine too slow for that, try the next slot.
        delay = jitter_for(f"default/{name}/{slot_text(slot)}", jitter)
        if delay >= timedelta(seconds=1.5):
            await asyncio.sleep(max(0.0, (slot - datetime.now(UTC)).total_seconds()) + 0.2)
            if datetime.now(UTC) < slot + delay - timedelta(seconds=0.5):
                break
        slot += timedelta(seconds=period)
    else:
        pytest.fail("no slot left time to update between it and its jittered start")
    spec = sc.Schedule()
    spec.CopyFrom(every(name, 3600, overlap="allow", jitter=dur(3.9)).schedule)
    await admin.UpdateSchedule(sc.UpdateScheduleRequest(schedule=spec))
    slot_id = f"{name}/{slot_text(slot)}"

    async def started() -> bool:
        return slot_id in {r.workflow_id for r in (await describe(admin, name)).recent_runs}

    await wait_until(started, timeout=15)
    history = await stub.GetWorkflowHistory(
        s.GetWorkflowHistoryRequest(execution=c.WorkflowExecution(workflow_id=slot_id))
    )
    assert history.events[0].type == "WorkflowStarted"

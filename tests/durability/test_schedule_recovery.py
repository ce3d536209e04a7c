"""Seed 003's rule: a scheduled run is not lost to a recycle, and never runs
twice. A `weft server` subprocess with an every-2s schedule is killed with
SIGKILL across three slots and restarted: with a catch-up window longer than
the outage the three slots' runs start on recovery, each once; with a window
of zero none of them does (they are counted as missed). Two nodes on
PostgreSQL, both running schedules, one of them killed, start every slot once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import schedules_pb2 as sc
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import dur, unique, wait_until
from tests.serverproc import ServerProcess

EVERY = 2.0


def create(name: str, wtype: str, every: float, window: float) -> sc.CreateScheduleRequest:
    return sc.CreateScheduleRequest(
        schedule=sc.Schedule(
            name=name,
            workflow_type=wtype,
            task_list="nobody-polls",
            every=dur(every),
            overlap="allow",  # every slot starts: what is counted is the slots
            catch_up_window=dur(window),
        )
    )


async def runs_by_id(stub: sg.WorkflowServiceStub, wtype: str) -> Counter[str]:
    resp = await stub.ListWorkflows(s.ListWorkflowsRequest(workflow_type=wtype, page_size=1000))
    assert not resp.next_page_token
    return Counter(e.execution.workflow_id for e in resp.executions)


def slot_id(name: str, slot: datetime) -> str:
    return f"{name}/{slot:%Y-%m-%dT%H:%M:%S}Z"


async def _reaching(read: Callable[[], Awaitable[int]], n: int) -> int | None:
    """`read()`'s value once it is `n` or more, else None (for `wait_until`)."""
    value = await read()
    return value if value >= n else None


async def sleep_until(at: datetime) -> None:
    await asyncio.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()))


@pytest.mark.parametrize(("window", "recovered"), [(60.0, True), (0.0, False)])
async def test_slots_missed_during_a_kill9_start_on_recovery_inside_the_window(
    db_url: str, tmp_path: Path, window: float, recovered: bool
) -> None:
    node = ServerProcess(db_url, tmp_path, name="sched")
    await node.start()
    try:
        name, wtype = unique("every2s"), unique("type")
        async with node.channel() as channel:
            admin = ag.AdminServiceStub(channel)
            await admin.CreateSchedule(create(name, wtype, EVERY, window))

            async def first_slot() -> datetime | None:
                resp = await admin.DescribeSchedule(sc.DescribeScheduleRequest(name=name))
                d = resp.description
                return d.recent_runs[0].slot.ToDatetime(UTC) if d.recent_runs else None

            first = await wait_until(first_slot, timeout=15, interval=0.02)
        # Down from just after a slot until past the next three.
        node.kill9()
        killed_at = datetime.now(UTC)
        outage = [first + timedelta(seconds=EVERY * k) for k in (1, 2, 3)]
        assert killed_at < outage[0], "killed too late to straddle three slots"
        await sleep_until(outage[-1] + timedelta(seconds=1.2))
        await node.start()
        # Scheduling again: a slot after the restart has its run (the first ones
        # may be missed too, with a window of zero, when the restart is slow).
        later = {slot_id(name, outage[-1] + timedelta(seconds=EVERY * k)) for k in range(1, 10)}

        async with node.channel() as channel:
            stub, admin = sg.WorkflowServiceStub(channel), ag.AdminServiceStub(channel)

            async def running_again() -> Counter[str] | None:
                runs = await runs_by_id(stub, wtype)
                return runs if later & set(runs) else None

            runs = await wait_until(running_again, timeout=20, interval=0.1)

            async def missed() -> int:
                described = await admin.DescribeSchedule(sc.DescribeScheduleRequest(name=name))
                return described.description.missed

            # The pass writes the schedule's row (its missed count among it) after
            # the runs it started have committed: a later slot's run may be seen
            # before the count.
            counted = 0 if recovered else await wait_until(lambda: _reaching(missed, 3))

        assert all(n == 1 for n in runs.values()), runs  # no slot twice
        assert runs[slot_id(name, first)] == 1
        outage_runs = [runs[slot_id(name, slot)] for slot in outage]
        if recovered:
            assert outage_runs == [1, 1, 1], (outage, runs)
        else:
            assert outage_runs == [0, 0, 0], (outage, runs)
            assert counted >= 3
    finally:
        node.stop()


async def test_two_nodes_never_start_a_slot_twice(postgres_url: str, tmp_path: Path) -> None:
    a = ServerProcess(postgres_url, tmp_path, name="node-a")
    b = ServerProcess(postgres_url, tmp_path, name="node-b")
    try:
        await asyncio.gather(a.start(), b.start())
        name, wtype = unique("both"), unique("type")
        async with a.channel() as chan_a, b.channel() as chan_b:
            await ag.AdminServiceStub(chan_a).CreateSchedule(create(name, wtype, 1.0, 60.0))
            stub_b = sg.WorkflowServiceStub(chan_b)
            # Both nodes run every pass (until the node lease makes one the leader).
            await wait_until(lambda: _at_least(stub_b, wtype, 4), timeout=20, interval=0.2)
            a.kill9()  # node B goes on alone
            began = time.monotonic()
            await wait_until(lambda: _at_least(stub_b, wtype, 9), timeout=20, interval=0.2)
            assert time.monotonic() - began < 15
            runs = await runs_by_id(stub_b, wtype)
            admin_b = ag.AdminServiceStub(chan_b)
            d = (await admin_b.DescribeSchedule(sc.DescribeScheduleRequest(name=name))).description
        assert all(n == 1 for n in runs.values()), runs
        # The slots are consecutive seconds: none lost either.
        slots = sorted(datetime.fromisoformat(w.split("/", 1)[1][:-1]) for w in runs)
        assert slots == [slots[0] + timedelta(seconds=k) for k in range(len(slots))]
        assert d.started >= len(slots) - 1  # (a pass may be in flight)
        assert d.started <= len(slots) + 1
    finally:
        a.stop()
        b.stop()


async def _at_least(stub: sg.WorkflowServiceStub, wtype: str, count: int) -> bool:
    return sum((await runs_by_id(stub, wtype)).values()) >= count

"""The schedule runner with an injected clock, on a real store (both
databases): a cron in Europe/Brussels across both DST changes, the catch-up
window, jitter, and a pass that died between its starts and its row write."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.api.common import ServiceSettings
from orchestrator.api.service import WorkflowService
from orchestrator.api.tokens import TokenCodec
from orchestrator.dispatch.pollers import PollerSightings
from orchestrator.dispatch.wakeups import Wakeups
from orchestrator.metrics import Metrics
from orchestrator.schedules.runner import NEVER, ScheduleRunner, start_time
from orchestrator.store.schedules import ScheduleRow
from orchestrator.store.store import Store
from tests.schedule_rows import schedule_row


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


class Clock:
    def __init__(self, at: str) -> None:
        self.now = utc(at)

    def __call__(self) -> datetime:
        return self.now

    def set(self, at: str) -> None:
        self.now = utc(at)


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    it = await Store.open(db_url)
    yield it
    await it.close()


def runner(store: Store, clock: Clock, service: WorkflowService) -> ScheduleRunner:
    return ScheduleRunner(store, service.start, lambda: True, clock)


async def service_of(store: Store) -> WorkflowService:
    return WorkflowService(
        store,
        TokenCodec(await store.token_secret()),
        Wakeups(),
        ServiceSettings(),
        Metrics(),
        PollerSightings(),
    )


def row(name: str, created: str, **fields: object) -> ScheduleRow:
    base = {
        "cron": "30 2 * * *",
        "every": None,
        "timezone": "Europe/Brussels",
        "catch_up_window": 365 * 86400.0,
    }
    return schedule_row(utc(created), name=name, **{**base, **fields})


async def ids(store: Store, name: str) -> list[str]:
    got = await store.schedules.get("default", name)
    assert got is not None
    return sorted(r.workflow_id for r in got.recent)


async def test_cron_across_both_dst_changes(store: Store) -> None:
    clock = Clock("2026-03-28T01:00:00")
    run = runner(store, clock, await service_of(store))
    await store.schedules.add(row("dst", "2026-03-28T00:00:00"))

    await run.pass_once()
    assert await ids(store, "dst") == []  # 02:30 CET is 01:30 UTC: not yet
    clock.set("2026-03-31T00:00:00")
    await run.pass_once()
    assert await ids(store, "dst") == [
        "dst/2026-03-28T01:30:00Z",  # 02:30 CET
        "dst/2026-03-29T01:30:00Z",  # 02:30 does not exist: 03:30 CEST, once
        "dst/2026-03-30T00:30:00Z",  # 02:30 CEST
    ]
    # Autumn: the repeated 02:30 fires once.
    await store.schedules.change(
        "default", "dst", lambda r: replace(r, last_slot=utc("2026-10-24T00:00:00"), recent=())
    )
    clock.set("2026-10-27T00:00:00")
    await run.pass_once()
    assert await ids(store, "dst") == [
        "dst/2026-10-24T00:30:00Z",
        "dst/2026-10-25T00:30:00Z",  # 02:30 CEST, not again at 02:30 CET
        "dst/2026-10-26T01:30:00Z",
    ]
    got = await store.schedules.get("default", "dst")
    assert got is not None and got.started == 6 and got.missed == 0


async def test_catch_up_window_and_jitter(store: Store) -> None:
    clock = Clock("2026-11-25T10:00:00")
    metrics = Metrics()
    service = await service_of(store)
    run = ScheduleRunner(store, service.start, lambda: True, clock, metrics.schedule_slots)
    await store.schedules.add(
        row("late", "2026-11-25T10:00:00", cron="", every=60.0, catch_up_window=90.0)
    )
    clock.set("2026-11-25T10:05:00")  # five slots due; the last two within 90 s + a pass
    await run.pass_once()
    got = await store.schedules.get("default", "late")
    assert got is not None
    assert await ids(store, "late") == ["late/2026-11-25T10:04:00Z", "late/2026-11-25T10:05:00Z"]
    assert got.missed == 3 and got.last_slot == utc("2026-11-25T10:05:00")
    counts = {
        outcome: metrics.registry.get_sample_value(
            "weft_schedule_slots_total", {"outcome": outcome}
        )
        for outcome in ("started", "missed")
    }
    assert counts == {"started": 2.0, "missed": 3.0}

    jittered = row("jit", "2026-11-25T10:00:00", cron="", every=3600.0, jitter=600.0)
    await store.schedules.add(jittered)
    at = start_time(jittered, utc("2026-11-25T11:00:00"))
    assert utc("2026-11-25T11:00:00") <= at < utc("2026-11-25T11:10:00")
    clock.now = at - timedelta(seconds=1)
    wait = await run.pass_once()
    assert await ids(store, "jit") == [] and 0 < wait <= 1.0
    clock.now = at
    await run.pass_once()
    assert await ids(store, "jit") == ["jit/2026-11-25T11:00:00Z"]


async def test_a_pass_lost_before_its_write_starts_nothing_twice(store: Store) -> None:
    clock = Clock("2026-11-25T10:00:00")
    run = runner(store, clock, await service_of(store))
    await store.schedules.add(row("crash", "2026-11-25T10:00:00", cron="", every=10.0))
    clock.set("2026-11-25T10:00:30")
    before = await store.schedules.get("default", "crash")
    assert before is not None
    # The starts commit, the row is never written (kill -9 right then).
    new, _ = await run._handle(before, clock())
    assert new.started == 3
    assert (await store.schedules.get("default", "crash")) == before
    await run.pass_once()
    got = await store.schedules.get("default", "crash")
    assert got is not None
    assert got.started == 3  # counted once, by the pass that wrote the row
    assert len(got.recent) == 3
    runs = await store.list_runs(
        "default",
        open_only=None,
        workflow_type="report",
        workflow_id="",
        start_from=None,
        start_to=None,
        after=None,
        limit=100,
    )
    crash_runs = [r for r in runs if r.key.workflow_id.startswith("crash/")]
    assert len(crash_runs) == 3


async def test_a_pass_reads_only_the_schedules_that_are_due(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row keeps when it is next due: a pass reads the rows due by then,
    those an operator changed, and those keeping a slot until a run closes."""
    clock = Clock("2026-11-25T10:00:00")
    run = runner(store, clock, await service_of(store))
    await store.schedules.add(row("daily", "2026-11-25T10:00:00"))  # 02:30 Brussels
    await store.schedules.add(row("hourly", "2026-11-25T10:00:00", cron="0 * * * *"))
    await store.schedules.add(row("paused", "2026-11-25T10:00:00", paused=True))
    assert len(await store.schedules.due(clock())) == 3  # new: not looked at yet

    assert await run.pass_once() == 1.0  # (a pass at least each PASS)
    due_at = {r.name: r.due_at for r in await store.schedules.find(None)}
    assert due_at == {
        "daily": utc("2026-11-26T01:30:00"),
        "hourly": utc("2026-11-25T11:00:00"),
        "paused": NEVER,
    }
    assert await store.schedules.due(clock()) == []
    # The next pass waits for the earliest of the rows it does not read.
    clock.set("2026-11-25T10:59:59.750000")
    assert await run.pass_once() == pytest.approx(0.25)

    clock.set("2026-11-25T11:00:30")
    handled: list[str] = []
    handle = run._handle

    async def recorded(r: ScheduleRow, now: datetime) -> tuple[ScheduleRow, datetime | None]:
        handled.append(r.name)
        return await handle(r, now)

    monkeypatch.setattr(run, "_handle", recorded)
    await run.pass_once()
    assert handled == ["hourly"]
    assert await ids(store, "hourly") == ["hourly/2026-11-25T11:00:00Z"]

    # An operator's change is looked at by the next pass, whatever it changed.
    await store.schedules.change("default", "paused", lambda r: replace(r, paused=False))
    handled.clear()
    await run.pass_once()
    assert handled == ["paused"]
    got = await store.schedules.get("default", "paused")
    assert got is not None and got.due_at == utc("2026-11-26T01:30:00")

    # A slot kept until the open run closes is looked at each pass, whenever
    # its next slot is due: here the run closed (there is none), so it starts.
    kept = row("kept", "2026-11-25T10:00:00", buffered_slot=utc("2026-11-25T11:00:00"))
    await store.schedules.add(replace(kept, due_at=NEVER))
    handled.clear()
    await run.pass_once()
    assert handled == ["kept"]
    assert await ids(store, "kept") == ["kept/2026-11-25T11:00:00Z"]

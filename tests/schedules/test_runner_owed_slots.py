"""`owed_slots`: what a schedule's old spec still owes when the spec changes:
the slots that came and were not handled (one waiting out its jitter, or due
since the runner's last pass), those past the catch-up window counted apart,
none for a paused schedule, none after the end time."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from orchestrator.schedules.runner import owed_slots, start_time
from orchestrator.store.schedules import ScheduleRow

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def minutely(**fields: object) -> ScheduleRow:
    row = ScheduleRow(
        namespace="default",
        name="m",
        workflow_type="report",
        task_list="tl",
        input=None,
        cron="",
        every=60.0,
        timezone="",
        overlap="allow",
        catch_up_window=3600.0,
        jitter=0.0,
        start_at=None,
        end_at=None,
        paused=False,
        note="",
        created_at=T0,
        updated_at=T0,
        last_slot=T0,
    )
    return replace(row, **fields)  # type: ignore[arg-type]


def test_the_slots_since_the_last_handled_one_are_owed() -> None:
    now = T0 + 3 * MINUTE + timedelta(seconds=30)
    assert owed_slots(minutely(), now) == ([T0 + MINUTE, T0 + 2 * MINUTE, T0 + 3 * MINUTE], 0)
    # Nothing came since the last one handled.
    assert owed_slots(minutely(last_slot=T0 + 3 * MINUTE), now) == ([], 0)


def test_a_slot_waiting_out_its_jitter_is_owed() -> None:
    row = minutely(jitter=59.0)
    slot = T0 + MINUTE
    # Just after the slot: its jittered start may not have come, and it is owed all the same.
    now = slot + timedelta(milliseconds=1)
    assert start_time(row, slot) >= slot
    assert owed_slots(row, now) == ([slot], 0)


def test_slots_past_the_catch_up_window_are_counted_missed() -> None:
    row = minutely(catch_up_window=90.0)
    now = T0 + 5 * MINUTE
    # A slot may start up to the window plus one pass (91 s) late: the slots of
    # 4 and 5 minutes are owed, those of 1, 2 and 3 minutes missed.
    assert owed_slots(row, now) == ([T0 + 4 * MINUTE, T0 + 5 * MINUTE], 3)


def test_a_paused_schedule_and_one_past_its_end_owe_nothing_more() -> None:
    now = T0 + 3 * MINUTE
    assert owed_slots(minutely(paused=True), now) == ([], 0)
    assert owed_slots(minutely(end_at=T0 + MINUTE), now) == ([T0 + MINUTE], 0)
    # A start time in the future: nothing owed before it.
    assert owed_slots(minutely(start_at=T0 + 10 * MINUTE), now) == ([], 0)

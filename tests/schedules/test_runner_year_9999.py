"""A slot whose jittered start falls past the year 9999 (where dates end) never
starts, and the pass goes on: it used to raise OverflowError, which failed the
schedule's every pass and logged it each second."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from orchestrator.schedules.runner import NEVER, ScheduleRunner, start_time
from orchestrator.store.schedules import ScheduleRow
from tests.schedule_rows import schedule_row

LAST_DAY = datetime(9999, 12, 31, tzinfo=UTC)


def daily(jitter: float) -> ScheduleRow:
    return schedule_row(
        LAST_DAY - timedelta(days=2),
        name="late",
        every=86400.0,
        catch_up_window=86400.0,
        jitter=jitter,
        start_at=LAST_DAY - timedelta(days=1),
    )


def test_a_start_jittered_past_the_last_date_is_never() -> None:
    row = daily(jitter=7 * 86400.0)
    assert start_time(row, LAST_DAY) == NEVER
    # Within range, the jitter still applies.
    earlier = LAST_DAY - timedelta(days=30)
    assert earlier <= start_time(row, earlier) < earlier + timedelta(days=7)


def test_the_pass_starts_what_it_can_and_waits_for_ever_on_the_rest() -> None:
    row = daily(jitter=7 * 86400.0)
    runner = ScheduleRunner(cast(Any, None), cast(Any, None), lambda: True)
    day_before = LAST_DAY - timedelta(days=1)
    now = LAST_DAY + timedelta(hours=12)
    assert start_time(row, day_before) <= now  # (its jitter, fixed per slot, has passed)
    new, slots, due = runner._due_slots(row, now)
    # The day before the last starts; the last day's slot can never start, so the
    # pass waits on it for ever, without raising.
    assert slots == [day_before]
    assert due == NEVER
    assert new.last_slot == day_before

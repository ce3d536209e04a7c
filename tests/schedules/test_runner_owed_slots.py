"""`owed_slots`: what a schedule's old spec still owes when the spec changes:
the slots that came and were not handled (one waiting out its jitter, or due
since the runner's last pass), those past the catch-up window counted apart,
none for a paused schedule, none after the end time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.schedules.runner import MAX_PENDING, owed_slots, start_time
from orchestrator.store.schedules import ScheduleRow
from tests.schedule_rows import schedule_row

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def minutely(**fields: object) -> ScheduleRow:
    return schedule_row(T0, **{"name": "m", "last_slot": T0, **fields})


SECOND = timedelta(seconds=1)


def test_a_slot_due_since_the_last_pass_is_owed_and_older_stalled_ones_are_not() -> None:
    now = T0 + 3 * MINUTE + 1.5 * SECOND
    assert owed_slots(minutely(last_slot=T0 + 2 * MINUTE), now) == ([T0 + 3 * MINUTE], 0)
    # The slots of 1 and 2 minutes were never reached (no node led): a change of
    # spec passes over them, as it always did; only the one in flight is owed.
    assert owed_slots(minutely(), now) == ([T0 + 3 * MINUTE], 0)
    # Nothing came since the last one handled.
    assert owed_slots(minutely(last_slot=T0 + 3 * MINUTE), now) == ([], 0)


def test_a_slot_waiting_out_its_jitter_is_owed() -> None:
    row = minutely(jitter=59.0)
    slot = T0 + MINUTE
    now = slot + 5 * SECOND
    assert start_time(row, slot) > now  # it has not started, and may not yet
    assert owed_slots(row, now) == ([slot], 0)


def test_a_slot_in_flight_past_its_catch_up_window_is_counted_missed() -> None:
    row = minutely(catch_up_window=0.0)
    # On time means within one pass of its start: 1.5 s late is missed.
    assert owed_slots(row, T0 + MINUTE + 1.5 * SECOND) == ([], 1)
    assert owed_slots(row, T0 + MINUTE + 0.5 * SECOND) == ([T0 + MINUTE], 0)


def test_paused_ended_not_yet_started_and_unreadable_schedules_owe_nothing() -> None:
    now = T0 + MINUTE + SECOND
    assert owed_slots(minutely(paused=True), now) == ([], 0)
    assert owed_slots(minutely(end_at=T0 + MINUTE), now) == ([T0 + MINUTE], 0)
    assert owed_slots(minutely(end_at=T0 + 30 * SECOND), now) == ([], 0)
    assert owed_slots(minutely(start_at=T0 + 10 * MINUTE), now) == ([], 0)
    # A stored spec that no longer parses (its zone was removed) owes nothing,
    # so updating the schedule still repairs it.
    gone = minutely(every=None, cron="* * * * *", timezone="Mars/Olympus")
    assert owed_slots(gone, now) == ([], 0)


def test_a_slot_already_pending_is_not_owed_twice_and_a_full_list_owes_as_missed() -> None:
    slot = T0 + MINUTE
    now = slot + SECOND
    assert owed_slots(minutely(pending=(slot,)), now) == ([], 0)
    full = tuple(T0 - n * SECOND for n in range(1, MAX_PENDING + 1))
    assert owed_slots(minutely(pending=full), now) == ([], 1)
    nearly = full[1:]
    assert owed_slots(minutely(pending=nearly), now) == ([slot], 0)

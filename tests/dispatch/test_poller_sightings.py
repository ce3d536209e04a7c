"""Pollers are recorded in memory and written in batches, never once per poll
(dispatch/pollers.py): a client that invents an identity per poll costs no write."""

from __future__ import annotations

from orchestrator.dispatch.pollers import REFRESH, PollerSightings
from orchestrator.store.rows import TaskListKey

KEY = TaskListKey("default", "activity", "work")
OTHER = TaskListKey("default", "decision", "work")


def test_sightings_are_written_once_each_and_repeats_within_refresh_are_not_news() -> None:
    seen = PollerSightings()
    seen.note(KEY, "a", 100.0)
    seen.note(KEY, "a", 100.0 + REFRESH / 2)  # the same news
    seen.note(KEY, "b", 101.0)
    assert sorted(seen.take_unwritten(), key=str) == sorted(
        [(KEY, "a", 100.0), (KEY, "b", 101.0)], key=str
    )
    assert seen.take_unwritten() == []
    seen.note(KEY, "a", 100.0 + REFRESH)
    assert seen.take_unwritten() == [(KEY, "a", 100.0 + REFRESH)]


def test_a_failed_write_is_tried_again() -> None:
    seen = PollerSightings()
    seen.note(KEY, "a", 1.0)
    rows = seen.take_unwritten()
    seen.put_back(rows)
    assert seen.take_unwritten() == rows


def test_recent_sightings_of_one_list() -> None:
    seen = PollerSightings()
    seen.note(KEY, "old", 1.0)
    seen.note(KEY, "new", 50.0)
    seen.note(OTHER, "elsewhere", 50.0)
    assert seen.recent(KEY, since=10.0) == {"new": 50.0}


def test_an_identity_per_poll_cannot_grow_memory_without_bound() -> None:
    seen = PollerSightings(max_sightings=100)
    for i in range(1000):
        seen.note(KEY, f"poll-{i}", float(i))
    assert len(seen.recent(KEY, since=0.0)) <= 100
    assert "poll-999" in seen.recent(KEY, since=0.0)  # the newest are kept


def test_the_latest_sighting_of_each_list_asked_about() -> None:
    seen = PollerSightings()
    seen.note(KEY, "old", 1.0)
    seen.note(KEY, "new", 50.0)
    seen.note(OTHER, "elsewhere", 70.0)
    assert seen.latest({KEY}) == {KEY: 50.0}
    assert seen.latest({KEY, OTHER, TaskListKey("default", "activity", "idle")}) == {
        KEY: 50.0,
        OTHER: 70.0,
    }

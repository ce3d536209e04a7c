"""Schedule maths (orchestrator/schedules/spec.py): the cron grammar, `every`,
and fire times in a time zone across both DST changes, from fixed instants."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.schedules.spec import Spec, SpecError, jitter_for, parse_cron, slot_text


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def times(spec: Spec, after: str, count: int) -> list[str]:
    return [slot_text(t) for t in spec.upcoming(utc(after), count)]


@pytest.mark.parametrize(
    ("text", "minutes", "hours"),
    [
        ("* * * * *", tuple(range(60)), tuple(range(24))),
        ("*/15 2 * * *", (0, 15, 30, 45), (2,)),
        ("5,10-12 0-23/6 * * *", (5, 10, 11, 12), (0, 6, 12, 18)),
        ("7/20 1 * * *", (7, 27, 47), (1,)),
    ],
)
def test_cron_fields(text: str, minutes: tuple[int, ...], hours: tuple[int, ...]) -> None:
    cron = parse_cron(text)
    assert cron.minutes == minutes
    assert cron.hours == hours


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("* * * *", "5 fields"),
        ("60 * * * *", "outside 0-59"),
        ("* 24 * * *", "outside 0-23"),
        ("*/0 * * * *", "positive"),
        ("5-1 * * * *", "backwards"),
        ("x * * * *", "not a number"),
        ("* * 0 * *", "outside 1-31"),
        ("* * * 13 *", "outside 1-12"),
    ],
)
def test_bad_crons_say_why(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_cron(text)


def test_spec_refuses_what_never_fires_and_bad_zones() -> None:
    with pytest.raises(SpecError, match="matches no date"):
        Spec.of("0 0 30 2 *", None, "")
    with pytest.raises(SpecError, match="unknown time zone"):
        Spec.of("0 0 * * *", None, "Mars/Olympus")
    with pytest.raises(SpecError, match="exactly one"):
        Spec.of("0 0 * * *", timedelta(seconds=5), "")
    with pytest.raises(SpecError, match="exactly one"):
        Spec.of("", None, "")
    with pytest.raises(SpecError, match="whole seconds"):
        Spec.of("", timedelta(milliseconds=500), "")


def test_day_fields_either_when_both_restricted() -> None:
    # The 13th, or any Friday (vixie cron); names work for months and days.
    spec = Spec.of("0 12 13 * fri", None, "UTC")
    assert times(spec, "2026-11-01T00:00:00", 4) == [
        "2026-11-06T12:00:00Z",  # Friday
        "2026-11-13T12:00:00Z",  # the 13th (a Friday too: once)
        "2026-11-20T12:00:00Z",
        "2026-11-27T12:00:00Z",
    ]
    assert times(Spec.of("0 0 1 jan,jul *", None, ""), "2026-02-01T00:00:00", 2) == [
        "2026-07-01T00:00:00Z",
        "2027-01-01T00:00:00Z",
    ]
    assert times(Spec.of("0 0 29 2 *", None, ""), "2026-01-01T00:00:00", 1) == [
        "2028-02-29T00:00:00Z"
    ]
    # 7 is Sunday too.
    assert parse_cron("0 0 * * 7").weekdays == frozenset({0})


def test_every_is_aligned_on_the_epoch_and_strictly_after() -> None:
    spec = Spec.of("", timedelta(minutes=15), "Europe/Brussels")
    assert times(spec, "2026-11-25T10:07:00", 2) == ["2026-11-25T10:15:00Z", "2026-11-25T10:30:00Z"]
    assert times(spec, "2026-11-25T10:15:00", 1) == ["2026-11-25T10:30:00Z"]
    two = Spec.of("", timedelta(seconds=2), "")
    assert two.fire_times(utc("2026-11-25T10:00:00"), utc("2026-11-25T10:00:07"), 10) == [
        utc("2026-11-25T10:00:02"),
        utc("2026-11-25T10:00:04"),
        utc("2026-11-25T10:00:06"),
    ]


def test_local_time_in_a_zone() -> None:
    # 02:00 in Brussels is 01:00 UTC in winter and 00:00 UTC in summer.
    spec = Spec.of("0 2 * * *", None, "Europe/Brussels")
    assert times(spec, "2026-11-25T01:00:00", 1) == ["2026-11-26T01:00:00Z"]
    assert times(spec, "2026-07-01T00:00:00", 1) == ["2026-07-02T00:00:00Z"]


def test_spring_forward_a_skipped_time_fires_once_shifted() -> None:
    # 29 March 2026, Brussels: 02:00 CET -> 03:00 CEST; 02:30 does not exist.
    daily = Spec.of("30 2 * * *", None, "Europe/Brussels")
    assert times(daily, "2026-03-28T00:00:00", 3) == [
        "2026-03-28T01:30:00Z",  # 02:30 CET
        "2026-03-29T01:30:00Z",  # 02:30 read with +01:00: 03:30 CEST, once
        "2026-03-30T00:30:00Z",  # 02:30 CEST
    ]
    # Hourly at :30: 02:30 (skipped) and 03:30 name the same instant: once.
    hourly = Spec.of("30 * * * *", None, "Europe/Brussels")
    assert times(hourly, "2026-03-28T23:45:00", 4) == [
        "2026-03-29T00:30:00Z",  # 01:30 CET
        "2026-03-29T01:30:00Z",  # 03:30 CEST (and the skipped 02:30)
        "2026-03-29T02:30:00Z",  # 04:30 CEST
        "2026-03-29T03:30:00Z",
    ]
    # Asked from inside the shift, nothing is fired twice nor left out.
    assert times(daily, "2026-03-29T01:00:00", 1) == ["2026-03-29T01:30:00Z"]
    assert times(daily, "2026-03-29T01:30:00", 1) == ["2026-03-30T00:30:00Z"]


def test_fall_back_a_repeated_time_fires_once() -> None:
    # 25 October 2026, Brussels: 03:00 CEST -> 02:00 CET; 02:30 happens twice.
    daily = Spec.of("30 2 * * *", None, "Europe/Brussels")
    assert times(daily, "2026-10-24T00:00:00", 3) == [
        "2026-10-24T00:30:00Z",  # 02:30 CEST
        "2026-10-25T00:30:00Z",  # the first 02:30 (CEST) only
        "2026-10-26T01:30:00Z",  # 02:30 CET
    ]
    # Asked between the two 02:30s, the second is not fired.
    assert times(daily, "2026-10-25T01:00:00", 1) == ["2026-10-26T01:30:00Z"]
    hourly = Spec.of("30 * * * *", None, "Europe/Brussels")
    assert times(hourly, "2026-10-24T23:45:00", 3) == [
        "2026-10-25T00:30:00Z",  # 02:30 CEST
        "2026-10-25T02:30:00Z",  # 03:30 CET (the repeated 02:30 CET is not fired again)
        "2026-10-25T03:30:00Z",
    ]


def test_jitter_is_fixed_per_slot_and_bounded() -> None:
    jitter = timedelta(seconds=30)
    first = jitter_for("default/nightly/2026-11-25T02:00:00Z", jitter)
    assert first == jitter_for("default/nightly/2026-11-25T02:00:00Z", jitter)
    spread = {jitter_for(f"s/{n}", jitter) for n in range(50)}
    assert all(timedelta(0) <= d < jitter for d in spread)
    assert len(spread) > 40
    assert jitter_for("x", timedelta(0)) == timedelta(0)


def test_slot_text() -> None:
    assert slot_text(utc("2026-11-25T02:00:00")) == "2026-11-25T02:00:00Z"
    assert slot_text(utc("2026-11-25T02:00:00.250")) == "2026-11-25T02:00:00.250Z"


_CRON_TEXT = st.text(alphabet="0123456789*/,- abcdefghijklmnopqrstuvwxyzJANFEB", max_size=40)
_ZONES = st.sampled_from(
    ["", "UTC", "Europe/Brussels", "America/New_York", "Asia/Kathmandu", "Australia/Lord_Howe"]
)


@settings(max_examples=300, deadline=None)
@given(text=_CRON_TEXT, zone_name=_ZONES, at=st.datetimes(timezones=st.just(UTC)))
def test_any_cron_text_is_a_spec_or_a_spec_error(text: str, zone_name: str, at: datetime) -> None:
    """Never another exception; and a spec's next time is strictly later, and
    stable (asking from just before it gives it again)."""
    try:
        spec = Spec.of(text, None, zone_name)
    except SpecError:
        return
    nxt = spec.next_after(at)
    if nxt is None:
        return
    assert nxt > at
    assert spec.next_after(nxt - timedelta(microseconds=1)) == nxt


def test_the_end_of_time_is_never() -> None:
    end = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
    assert Spec.of("30 * * * *", None, "Europe/Brussels").next_after(end) is None
    assert Spec.of("", timedelta(days=1), "").next_after(end) is None


@pytest.mark.parametrize("name", ["../../etc/passwd", "Europe/", "a\x00b", "/abs", "x" * 300])
def test_zone_names_that_are_not_zones(name: str) -> None:
    with pytest.raises(SpecError):
        Spec.of("0 0 * * *", None, name)

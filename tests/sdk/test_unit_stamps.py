"""sdk.stamps gives what protobuf's own Timestamp helpers give."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from sdk import stamps


class _NoOffset(tzinfo):
    """A tzinfo that knows no offset: Python and protobuf read it as naive."""

    def utcoffset(self, dt: datetime | None) -> None:
        return None

    def dst(self, dt: datetime | None) -> None:
        return None

    def tzname(self, dt: datetime | None) -> None:
        return None


MOMENTS = [
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(2026, 11, 26, 21, 30, 5, 123456, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2026, 3, 29, 2, 30, tzinfo=timezone(timedelta(hours=-7, minutes=-30))),
    datetime(2026, 11, 26, 21, 30, 5, 7),  # naive: read as UTC
    datetime(2026, 11, 26, 21, 30, 5, 7, tzinfo=_NoOffset()),  # (as naive)
]


@pytest.mark.parametrize("moment", MOMENTS, ids=str)
def test_set_datetime_matches_from_datetime(moment: datetime) -> None:
    ours, theirs = Timestamp(), Timestamp()
    stamps.set_datetime(ours, moment)
    theirs.FromDatetime(moment)
    assert (ours.seconds, ours.nanos) == (theirs.seconds, theirs.nanos)


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(0, 0), (1_764_192_605, 123_456_789), (-1, 999_999_999), (-62_135_596_800, 0), (5, 999)],
)
def test_reading_matches_to_datetime(seconds: int, nanos: int) -> None:
    stamp = Timestamp(seconds=seconds, nanos=nanos)
    expected = stamp.ToDatetime(tzinfo=UTC)
    assert stamps.to_datetime(stamp) == expected
    assert stamps.to_datetime(stamp).tzinfo is UTC
    assert stamps.to_epoch(stamp) == expected.timestamp()

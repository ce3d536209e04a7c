"""Timestamps between protobuf and Python, for the paths that convert one per
event: what `Timestamp.ToDatetime(tzinfo=UTC)` and `FromDatetime` give, in
a third to a sixth of their CPU (they check ranges and go through
`calendar.timegm` and `astimezone` on every call).

The values are the same to the microsecond for valid timestamps (years 1 to 9999,
nanos in [0, 1e9)): nanoseconds below a microsecond are dropped, as protobuf drops
them. Unlike protobuf's, these do not refuse an invalid one; they are for stamps
the server made.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)


def to_datetime(stamp: Timestamp) -> datetime:
    """The moment as an aware UTC datetime."""
    return _EPOCH + timedelta(seconds=stamp.seconds, microseconds=stamp.nanos // 1000)


def to_epoch(stamp: Timestamp) -> float:
    """Seconds since the epoch, as `to_datetime(stamp).timestamp()` gives them."""
    return (stamp.seconds * 1_000_000 + stamp.nanos // 1000) / 1_000_000


def set_datetime(stamp: Timestamp, moment: datetime) -> None:
    """Set `stamp` to `moment` (a naive datetime is read as UTC)."""
    delta = moment - (_EPOCH if moment.utcoffset() is not None else _EPOCH_NAIVE)
    stamp.seconds = delta.days * 86_400 + delta.seconds
    stamp.nanos = delta.microseconds * 1000

"""Durations as people write them: `500ms`, `10s`, `5m`, `2h`, `7d`, and
combinations such as `1h30m` (CONTRACT.md), for the CLI and YAML; code passes
`timedelta`, which `duration` turns into what a request carries."""

from __future__ import annotations

import re
from datetime import timedelta

from google.protobuf.duration_pb2 import Duration

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
# A day short of timedelta's largest: float seconds round, and must stay below it.
_LONGEST = (timedelta.max - timedelta(days=1)).total_seconds()


def parse_duration(text: str) -> timedelta:
    """Parse a duration; raises ValueError with a readable message."""
    raw = text.strip().replace(" ", "")
    if not raw:
        raise ValueError("empty duration")
    pos, total = 0, 0.0
    for match in _PART.finditer(raw):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(raw):
        raise ValueError(
            f"invalid duration {_shown(text)}: use e.g. 500ms, 10s, 5m, 2h, 7d or 1h30m"
        )
    if not total <= _LONGEST:  # (past what a timedelta holds; NaN cannot arise, inf can)
        raise ValueError(
            f"duration {_shown(text)} is out of range (longer than a timedelta can hold)"
        )
    return timedelta(seconds=total)


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 40 else f"{text[:40]!r}…"


def duration(value: timedelta | None) -> Duration | None:
    """A timedelta as the protobuf Duration a request carries (None stays unset)."""
    if value is None:
        return None
    out = Duration()
    out.FromTimedelta(value)
    return out

"""When a schedule fires: a 5-field cron in an IANA time zone, or `every` a
fixed duration. Pure: no clock, no I/O; every function takes the instant it
works from, so the DST rules are unit-tested with fixed instants.

Time zones (what Temporal's scheduler does, Go's `time.Date` semantics):
- A cron time that does not exist locally (the hour skipped when clocks go
  forward) fires once, at the instant the wall time names with the offset
  before the change: 02:30 on the spring-forward day in Europe/Brussels fires
  at 03:30 CEST (01:30 UTC). Where that lands on another match of the same
  spec (an hourly cron's 03:30), it fires once.
- A wall time that happens twice (the hour repeated when clocks go back)
  fires once, at its first occurrence.
`every` is a fixed span of real time, aligned on the Unix epoch (as Temporal's
interval specs are), and ignores the time zone.
"""

from __future__ import annotations

import errno
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A cron that matches no day within this many years never fires (30 Feb):
# refused when made, so a search never runs for ever. Eight years sees 29 Feb.
SEARCH_DAYS = 8 * 366
# The largest jump of any zone's clocks that fold=0 can reorder matches across.
SETTLE = timedelta(hours=3)
_NOT_A_ZONE = frozenset({errno.ENAMETOOLONG, errno.EISDIR, errno.ENOTDIR})
MIN_EVERY = timedelta(seconds=1)
# Where a new cron is tried: one that matches no date from here never fires.
_PROBE = datetime(2024, 1, 1, tzinfo=UTC)

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, low, high, names)
_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 7, _DAYS),
)


class SpecError(ValueError):
    """A cron, duration or time zone that cannot be used; the message says why."""


@dataclass(frozen=True)
class Cron:
    text: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday (7 is folded into 0)
    any_day: bool  # day-of-month was "*"
    any_weekday: bool  # day-of-week was "*"

    def matches_date(self, d: date) -> bool:
        if d.month not in self.months:
            return False
        in_month = d.day in self.days
        in_week = (d.isoweekday() % 7) in self.weekdays
        # Vixie cron: with both day fields restricted, either one matching is enough.
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week


def _value(text: str, low: int, high: int, names: tuple[str, ...], field: str) -> int:
    lowered = text.lower()
    if lowered in names:
        return names.index(lowered) + low
    if not text.isdigit():
        raise SpecError(f"cron {field}: {text!r} is not a number")
    number = int(text)
    if not low <= number <= high:
        raise SpecError(f"cron {field}: {number} is outside {low}-{high}")
    return number


def _field(text: str, field: str, low: int, high: int, names: tuple[str, ...]) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise SpecError(f"cron {field}: step {step_text!r} must be a positive number")
            step = int(step_text)
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            first = _value(a, low, high, names, field)
            last = _value(b, low, high, names, field)
            if first > last:
                raise SpecError(f"cron {field}: range {base!r} runs backwards")
        else:
            first = _value(base, low, high, names, field)
            last = high if step_text else first
        values.update(range(first, last + 1, step))
    return values


def parse_cron(text: str) -> Cron:
    """minute hour day-of-month month day-of-week, with *, lists, ranges and steps."""
    parts = text.split()
    if len(parts) != 5:
        raise SpecError(
            f"cron {text!r} must have 5 fields (minute hour day-of-month month day-of-week)"
        )
    sets = [
        _field(part, name, low, high, names)
        for part, (name, low, high, names) in zip(parts, _FIELDS, strict=True)
    ]
    weekdays = {d % 7 for d in sets[4]}
    return Cron(
        text=" ".join(parts),
        minutes=tuple(sorted(sets[0])),
        hours=tuple(sorted(sets[1])),
        days=frozenset(sets[2]),
        months=frozenset(sets[3]),
        weekdays=frozenset(weekdays),
        any_day=parts[2] == "*",
        any_weekday=parts[4] == "*",
    )


def zone(name: str) -> ZoneInfo:
    if not name:
        return ZoneInfo("UTC")
    try:
        return ZoneInfo(name)
    except OSError as exc:
        # A name too long for a file, or a folder of zones (seen when the zones
        # come from the tzdata package): unknown. Any other OSError is the machine's.
        if exc.errno not in _NOT_A_ZONE:
            raise
        raise SpecError(
            f"unknown time zone {name!r} (use an IANA name such as Europe/Brussels)"
        ) from exc
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise SpecError(
            f"unknown time zone {name!r} (use an IANA name such as Europe/Brussels)"
        ) from exc


def _walls(cron: Cron, start: datetime) -> Iterator[datetime]:
    """Wall times (naive, local) matching the cron, from `start` on, in order."""
    day = start.date()
    for _ in range(SEARCH_DAYS):
        if cron.matches_date(day):
            for hour in cron.hours:
                for minute in cron.minutes:
                    wall = datetime(day.year, day.month, day.day, hour, minute)
                    if wall >= start:
                        yield wall
        day += timedelta(days=1)


@dataclass(frozen=True)
class Spec:
    """A schedule's firing rule: exactly one of `cron` and `every`."""

    cron: Cron | None
    every: timedelta | None
    tz: ZoneInfo

    @classmethod
    def of(cls, cron: str, every: timedelta | None, timezone: str) -> Spec:
        if bool(cron) == (every is not None):
            raise SpecError("give exactly one of cron and every")
        if every is not None and (every < MIN_EVERY or every.microseconds):
            raise SpecError("every must be whole seconds, at least 1s")
        spec = cls(parse_cron(cron) if cron else None, every, zone(timezone))
        if spec.next_after(_PROBE) is None:
            raise SpecError(f"cron {cron!r} matches no date (within {SEARCH_DAYS // 366} years)")
        return spec

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire time strictly after `after` (aware, UTC); None: never
        (nor near the end of the year 9999, where dates end)."""
        try:
            return self._next_after(after)
        except OverflowError:
            return None

    def _next_after(self, after: datetime) -> datetime | None:
        if self.every is not None:
            step = _micros(self.every)
            elapsed = _micros(after - EPOCH)
            return EPOCH + timedelta(microseconds=(elapsed // step + 1) * step)
        assert self.cron is not None
        # Start early: fold=0 puts a skipped wall time after later wall times.
        local = after.astimezone(self.tz).replace(tzinfo=None, second=0, microsecond=0)
        best: datetime | None = None
        horizon: datetime | None = None
        for wall in _walls(self.cron, local - SETTLE):
            if horizon is not None and wall > horizon:
                break
            at = wall.replace(tzinfo=self.tz).astimezone(UTC)  # fold=0: first occurrence
            if at > after and (best is None or at < best):
                best = at
                if horizon is None:
                    horizon = wall + SETTLE
        return best

    def fire_times(self, after: datetime, until: datetime, limit: int) -> list[datetime]:
        """Fire times in (after, until], at most `limit` of them (the earliest)."""
        out: list[datetime] = []
        at = self.next_after(after)
        while at is not None and at <= until and len(out) < limit:
            out.append(at)
            at = self.next_after(at)
        return out

    def upcoming(self, after: datetime, count: int) -> list[datetime]:
        out: list[datetime] = []
        at = self.next_after(after)
        while at is not None and len(out) < count:
            out.append(at)
            at = self.next_after(at)
        return out


def _micros(span: timedelta) -> int:
    return (span.days * 86_400 + span.seconds) * 1_000_000 + span.microseconds


def jitter_for(key: str, jitter: timedelta) -> timedelta:
    """A slot's start delay: the same on every node and after every restart
    (derived from the slot), spread over [0, jitter)."""
    if jitter <= timedelta(0):
        return timedelta(0)
    fraction = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    return timedelta(microseconds=int(_micros(jitter) * fraction))


def slot_text(slot: datetime) -> str:
    """A slot as it appears in workflow ids: UTC ISO 8601, milliseconds only when set."""
    utc = slot.astimezone(UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond // 1000:03d}"
    return text + "Z"

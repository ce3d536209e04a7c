"""The deadline scanner: every timeout and user timer is a row with a due time;
this loop feeds due rows through the engine like any other command.

Rows are read without locks; each is fired under its run's row lock, taken with
SKIP LOCKED so that nodes spread the due rows instead of queueing on the same
run. The engine re-checks the row under that lock, so a row two nodes both see
fires once and a stale one is a no-op.
Overdue rows of a node that was down fire on the first pass after start.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog

from orchestrator.engine.errors import Unavailable
from orchestrator.engine.timeouts import fire_deadline
from orchestrator.metrics import Metrics
from orchestrator.store.store import DueDeadline, Store

log = structlog.get_logger("weft.timers")

_IDLE_RECHECK = 1.0  # deadlines another node creates are seen within this
_BATCH = 200
# A due row that did not fire is tried again after this, doubling each time up
# to the most: at first as soon as a rounding needs, at last every 5 minutes.
_RETRY_FIRST = 0.05
_RETRY_MAX = 300.0
_BUSY_RECHECK = 0.05  # a due row whose run another node or a command holds


class DeadlineScanner:
    def __init__(self, store: Store, metrics: Metrics) -> None:
        self._store = store
        self._metrics = metrics
        self._wake = asyncio.Event()
        self._next_due: float | None = None
        self._hinted: float | None = None
        """The earliest deadline hinted while a pass runs (the pass's read may
        have come before its commit); taken into the pause after the pass."""
        self._passing = False
        self._failing: dict[tuple[str, str, int], _Failing] = {}
        """Due rows that did not fire, by (run, kind, ref), until one fires or
        is no longer due."""

    def hint(self, due: float) -> None:
        """A commit on this node created a deadline: wake early if it is sooner
        than the next look; while a pass runs, keep it for the next look."""
        if self._passing:
            if self._hinted is None or due < self._hinted:
                self._hinted = due
        elif self._next_due is None or due < self._next_due:
            self._wake.set()

    async def run(self) -> None:
        while True:
            fired: int = 0
            nxt: datetime | None = None
            self._passing, self._hinted = True, None
            try:
                fired, nxt = await self.fire_due()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("timers.scan_failed", error=str(exc)[:200])
            self._passing = False
            looks = (nxt.timestamp() if nxt is not None else None, self._hinted)
            self._next_due = min((t for t in looks if t is not None), default=None)
            now = datetime.now(UTC).timestamp()
            pause = _IDLE_RECHECK
            if self._next_due is not None:
                pause = min(pause, self._next_due - now)
            if not fired:
                # A due row whose run was busy (or past due on a clock a hair
                # ahead): look again shortly rather than spin.
                pause = max(pause, _BUSY_RECHECK)
            # No await since the pass ended: no hint can have come in between.
            self._wake.clear()
            if pause > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), pause)

    async def fire_due(self) -> tuple[int, datetime | None]:
        """Fire every due deadline. Returns how many appended an event, and when
        to look again (None: no deadline is left), both from the reads that found
        the due ones: the earliest of a due one whose run was busy (its due time,
        so at once), the next try of one that did not fire (`_Failing`), and the
        first not yet due.

        The due ones are read in pages, each after the last row of the one
        before: rows that cannot fire never hide the rows behind them. (So each
        pass reads every due row, those waiting for their next try too: a
        page per 200 of them.)"""
        fired = 0
        looks: list[datetime] = []
        after: DueDeadline | None = None
        seen: set[tuple[str, str, int]] = set()
        while True:
            now = datetime.now(UTC)
            rows = await self._store.deadlines_due_and_next(now, _BATCH, after)
            due = [row for row in rows if row.due <= now]
            for row in due:
                seen.add(_ref(row))
                again = await self._fire_unless_failing(row, now)
                if again is None:
                    fired += 1
                else:
                    looks.append(again)
            if len(due) > _BATCH:
                after = due[-1]
                continue  # more were due than one read brings: read on after them
            # A complete pass: what failed before and is no longer due is gone.
            self._failing = {ref: f for ref, f in self._failing.items() if ref in seen}
            looks.extend(row.due for row in rows if row.due > now)
            return fired, min(looks, default=None)

    async def _fire_unless_failing(self, row: DueDeadline, now: datetime) -> datetime | None:
        """None if it fired; else when to look at it again. A row that did not
        fire (and was not busy) is tried again after a back-off that doubles
        each time, and not before."""
        ref = _ref(row)
        failing = self._failing.get(ref)
        if failing is not None and failing.retry_at > now:
            return failing.retry_at
        outcome = await self._fire(row)
        if outcome is True:
            self._failing.pop(ref, None)
            return None
        if outcome is None:
            # Busy: another node or a command has the run; look again shortly
            # (a row failing before keeps its back-off: the other may be trying it).
            return row.due
        now = datetime.now(UTC)  # (the back-off counts from the try's end)
        # Firing raised (a run the engine cannot read, a bug), or the engine
        # found it not due in the run's state: back off, so that the row
        # neither costs a transaction every pass nor floods the log. The
        # database out of reach is no fault of the row's: once it is back, the
        # row fires within a second.
        failing = _Failing.next(failing, now, unavailable=isinstance(outcome, Unavailable))
        self._failing[ref] = failing
        if outcome is False and failing.attempts == 1:
            # Not due once is no failure: another node fired it after this
            # pass read it (the row is gone at the next look), or a rounding.
            # Not due again, the row is out of step with its run.
            return failing.retry_at
        if isinstance(outcome, Unavailable):
            # Every due row meets the outage: it is the database's failure, which
            # the store's own retries log, not this row's.
            log.debug("timers.fire_unavailable", run_id=row.run_id, error=str(outcome)[:200])
            return failing.retry_at
        log.warning(
            "timers.fire_failed",
            run_id=row.run_id,
            kind=row.kind,
            ref_id=row.ref_id,
            attempts=failing.attempts,
            retry_in=round((failing.retry_at - now).total_seconds(), 3),
            error=_said(outcome) if outcome is not False else "not due in its run's state",
        )
        self._metrics.deadlines_failed.labels(row.kind).inc()
        return failing.retry_at

    async def _fire(self, row: DueDeadline) -> bool | Exception | None:
        """True if it appended an event; False if the engine found it not due;
        None if its run was busy; what firing it raised, if it did."""
        try:
            appended = await self._store.transact_unless_busy(
                row.run_id, lambda t: fire_deadline(t, row.kind, row.ref_id)
            )
        except Exception as exc:  # (EngineError included)
            return exc
        if appended:
            self._metrics.deadlines_fired.labels(row.kind).inc()
            log.info("timers.fired", run_id=row.run_id, kind=row.kind, ref_id=row.ref_id)
        return appended


@dataclass(frozen=True)
class _Failing:
    """A due row that did not fire: how often in a row, and when to try again."""

    attempts: int
    retry_at: datetime

    @classmethod
    def next(cls, before: _Failing | None, now: datetime, *, unavailable: bool) -> _Failing:
        """After one more failure: with the database out of reach, a second
        later and the count as it was (an outage says nothing of the row)."""
        attempts = 0 if before is None else before.attempts
        if unavailable:
            return cls(attempts, now + timedelta(seconds=_IDLE_RECHECK))
        attempts += 1
        pause = min(_RETRY_FIRST * 2 ** min(attempts - 1, 32), _RETRY_MAX)
        return cls(attempts, now + timedelta(seconds=pause))


def _ref(row: DueDeadline) -> tuple[str, str, int]:
    """The deadline a due row is, whatever its due time."""
    return (row.run_id, row.kind, row.ref_id)


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]

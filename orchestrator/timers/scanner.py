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
from datetime import UTC, datetime

import structlog

from orchestrator.engine.errors import EngineError
from orchestrator.engine.timeouts import fire_deadline
from orchestrator.metrics import Metrics
from orchestrator.store.store import DueDeadline, Store

log = structlog.get_logger("weft.timers")

_IDLE_RECHECK = 1.0  # deadlines another node creates are seen within this
_BATCH = 200


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
                # A due row the engine judged not yet due (clock skew between
                # nodes, rounding): look again shortly rather than spin.
                pause = max(pause, 0.05)
            # No await since the pass ended: no hint can have come in between.
            self._wake.clear()
            if pause > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), pause)

    async def fire_due(self) -> tuple[int, datetime | None]:
        """Fire every due deadline. Returns how many appended an event, and when
        to look again (None: no deadline is left), both from the read that found
        the due ones: at the first due one that did not fire (its run was busy,
        or the engine judged it not yet due), else at the first not yet due."""
        fired = 0
        while True:
            now = datetime.now(UTC)
            rows = await self._store.deadlines_due_and_next(now, _BATCH)
            due = [row for row in rows if row.due <= now]
            moved = False
            first_unfired: datetime | None = None
            for row in due:
                if await self._fire(row):
                    fired += 1
                    moved = True
                elif first_unfired is None:
                    first_unfired = row.due
            if len(due) > _BATCH and moved:
                continue  # more were due than one read brings, and these moved
            if first_unfired is not None:
                return fired, first_unfired
            return fired, next((row.due for row in rows if row.due > now), None)

    async def _fire(self, row: DueDeadline) -> bool:
        try:
            appended = await self._store.transact_unless_busy(
                row.run_id, lambda t: fire_deadline(t, row.kind, row.ref_id)
            )
        except (EngineError, Exception) as exc:
            log.warning("timers.fire_failed", run_id=row.run_id, kind=row.kind, error=str(exc))
            return False
        if appended is None:
            return False  # busy: another node or a command has the run; seen again next pass
        if appended:
            self._metrics.deadlines_fired.labels(row.kind).inc()
            log.info("timers.fired", run_id=row.run_id, kind=row.kind, ref_id=row.ref_id)
        return appended

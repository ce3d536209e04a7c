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

    def hint(self, due: float) -> None:
        """A commit on this node created a deadline; wake early if it is sooner."""
        if self._next_due is None or due < self._next_due:
            self._wake.set()

    async def run(self) -> None:
        while True:
            fired, nxt = 0, None
            # Cleared, with the next due time forgotten, before the pass reads:
            # any deadline committed here meanwhile (a fired timeout's retry,
            # say) leaves it set, and the next pass follows at once.
            self._wake.clear()
            self._next_due = None
            try:
                fired, nxt = await self.fire_due()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("timers.scan_failed", error=str(exc)[:200])
            now = datetime.now(UTC).timestamp()
            self._next_due = nxt.timestamp() if nxt else None
            pause = _IDLE_RECHECK if nxt is None else min(_IDLE_RECHECK, nxt.timestamp() - now)
            if not fired:
                # A due row the engine judged not yet due (clock skew between
                # nodes, rounding): look again shortly rather than spin.
                pause = max(pause, 0.05)
            if pause > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), pause)

    async def fire_due(self) -> tuple[int, datetime | None]:
        """Fire every due deadline: how many appended an event, and when to look
        again (None: no deadline left), from the same read as the due ones: the
        first deadline not yet due, or a due one that did not fire (its run
        busy, say), which is looked at again shortly."""
        fired = 0
        while True:
            now = datetime.now(UTC)
            earliest = await self._store.earliest_deadlines(_BATCH + 1)
            due = [row for row in earliest if row.due <= now]
            unfired: list[datetime] = []
            for row in due:
                if await self._fire(row):
                    fired += 1
                else:
                    unfired.append(row.due)
            if len(due) == len(earliest) > _BATCH and len(unfired) < len(due):
                continue  # the whole batch was due, and it moved: there may be more
            later = [*unfired[:1], *(row.due for row in earliest[len(due) : len(due) + 1])]
            return fired, min(later, default=None)

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

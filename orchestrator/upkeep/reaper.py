"""The worker-session reaper (the leader's): a session silent past its timeout
is marked lost, and every task it had started times out at once as
WORKER_LOST, in each run `worker_runs` names for it. A session that
unregistered is finished the same way (what it abandoned past its grace).

Marking and reaping are separate steps, each safe to repeat: a leader that
dies between them leaves the session ended with runs still named, and the
next pass (on whichever node leads then) finishes it.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from orchestrator.engine.errors import NotFound
from orchestrator.engine.timeouts import worker_lost
from orchestrator.metrics import Metrics
from orchestrator.store.rows import utcnow
from orchestrator.store.store import Store
from orchestrator.store.workers import LOST, WorkerSession

log = structlog.get_logger("weft.workers")
RUNS_PER_PASS = 1000


class Reaper:
    def __init__(self, store: Store, metrics: Metrics, on_ended: Callable[[str], None]) -> None:
        self._store = store
        self._metrics = metrics
        self._on_ended = on_ended

    async def reap(self) -> int:
        """One pass; the number of tasks timed out."""
        now = utcnow()
        for session in await self._store.workers.expired(now):
            if await self._store.workers.end(session.session_id, LOST, now, only_expired=True):
                self._metrics.worker_sessions_lost.inc()
                log.warning(
                    "worker.lost",
                    session=session.session_id,
                    identity=session.identity,
                    host=session.host,
                    pid=session.pid,
                    last_heartbeat=session.last_seen.isoformat(),
                )
                self._on_ended(session.session_id)
        timed_out = 0
        for session in await self._store.workers.ended_with_runs():
            timed_out += await self._finish(session)
        return timed_out

    async def _finish(self, session: WorkerSession) -> int:
        sid, identity = session.session_id, session.identity
        run_ids = await self._store.workers.runs_of(sid, RUNS_PER_PASS)
        timed_out = 0
        for run_id in run_ids:
            try:
                if await self._store.transact(run_id, lambda t: worker_lost(t, sid, identity)):
                    timed_out += 1
                    log.info("worker.tasks_timed_out", session=sid, run_id=run_id)
            except NotFound:
                pass  # the run is gone (purged): nothing of it to time out
        if len(run_ids) < RUNS_PER_PASS:
            # Every open run has been looked at; rows of closed ones need nothing.
            await self._store.workers.forget_session_runs(sid)
        else:
            await self._store.workers.forget_runs(sid, run_ids)
        if timed_out:
            self._metrics.worker_lost_runs.inc(timed_out)
        return timed_out

"""Worker sessions and the runs their tasks are in (README "Workers and nodes").

A session is live while its heartbeats keep moving `expires_at`; it ends
"stopped" (the worker unregistered) or "lost" (the leader's reaper found it
expired). The reaper then times out, at once, every task the session had
started, looking only at the runs `worker_runs` names for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, exists, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from orchestrator.engine.errors import FailedPrecondition

from . import dialect
from .notices import CHANGES_CHANNEL, WORKER, change
from .reads import StoreBase
from .rows import aware
from .schema import runs, worker_runs, worker_sessions

LIVE, STOPPED, LOST = "live", "stopped", "lost"
# Ended sessions are kept this long for `weft workers`, then deleted.
KEEP_ENDED = timedelta(days=1)


@dataclass(frozen=True)
class WorkerSession:
    session_id: str
    namespace: str
    identity: str
    host: str
    pid: int
    task_lists: tuple[tuple[str, str], ...]
    """(kind, name) pairs."""
    build_id: str
    principal: str
    timeout: float
    status: str
    registered_at: datetime
    last_seen: datetime
    expires_at: datetime
    ended_at: datetime | None = None


def _session(r: object) -> WorkerSession:
    m = r._mapping  # type: ignore[attr-defined]
    return WorkerSession(
        session_id=m["session_id"],
        namespace=m["namespace"],
        identity=m["identity"],
        host=m["host"],
        pid=m["pid"],
        task_lists=tuple((kind, name) for kind, name in json.loads(m["task_lists"])),
        build_id=m["build_id"],
        principal=m["principal"],
        timeout=m["timeout"],
        status=m["status"],
        registered_at=aware(m["registered_at"]),
        last_seen=aware(m["last_seen"]),
        expires_at=aware(m["expires_at"]),
        ended_at=aware(m["ended_at"]) if m["ended_at"] is not None else None,
    )


def _naive(value: datetime) -> datetime:
    return value.replace(tzinfo=None)


class WorkerSessions:
    """Reads and writes of worker_sessions and worker_runs."""

    def __init__(self, store: StoreBase) -> None:
        self._store = store

    async def register(self, session: WorkerSession) -> None:
        values = {
            "session_id": session.session_id,
            "namespace": session.namespace,
            "identity": session.identity,
            "host": session.host,
            "pid": session.pid,
            "task_lists": json.dumps([list(pair) for pair in session.task_lists]),
            "build_id": session.build_id,
            "principal": session.principal,
            "timeout": session.timeout,
            "status": LIVE,
            "registered_at": _naive(session.registered_at),
            "last_seen": _naive(session.last_seen),
            "expires_at": self._clock(session.registered_at) + timedelta(seconds=session.timeout),
            "ended_at": None,
        }
        store = self._store

        async def attempt() -> None:
            async with store._write() as conn:
                await conn.execute(insert(worker_sessions).values(**values))

        await store._retrying(attempt)

    async def get(self, session_id: str) -> WorkerSession | None:
        row = await self._store._first(
            select(worker_sessions).where(worker_sessions.c.session_id == session_id)
        )
        return _session(row) if row is not None else None

    def _clock(self, now: datetime) -> Any:
        """The time sessions expire by: the database's on PostgreSQL, so that
        nodes whose clocks disagree judge a session alike (as the lease)."""
        return dialect.clock(self._store.is_pg, _naive(now))

    async def heartbeat(self, session: WorkerSession, now: datetime) -> None:
        """Move a live session's expiry on by its timeout; FAILED_PRECONDITION if
        it has ended or expired (the worker registers again)."""
        store = self._store
        c = worker_sessions.c
        if session.status != LIVE:
            raise _ended(session)
        at = self._clock(now)

        async def move() -> int:
            async with store._write() as conn:
                done = await conn.execute(
                    update(worker_sessions)
                    .where(c.session_id == session.session_id, c.status == LIVE)
                    .where(c.expires_at >= at)
                    .values(
                        last_seen=_naive(now), expires_at=at + timedelta(seconds=session.timeout)
                    )
                )
                return int(done.rowcount)

        if not await store._retrying(move):
            after = await self.get(session.session_id)
            raise _ended(after or session)

    async def end(self, session_id: str, status: str, now: datetime, *, only_expired: bool) -> bool:
        """Mark a live session stopped or lost (a lost one only if it is still
        expired: a heartbeat may have come since it was read). True if it ended
        now; other nodes are told on PostgreSQL."""
        store = self._store
        c = worker_sessions.c
        query = update(worker_sessions).where(c.session_id == session_id, c.status == LIVE)
        if only_expired:
            query = query.where(c.expires_at < self._clock(now))

        async def attempt() -> bool:
            async with store._write() as conn:
                done = await conn.execute(query.values(status=status, ended_at=_naive(now)))
                if done.rowcount:
                    await _notify(conn, store, session_id)
                return bool(done.rowcount)

        ended: bool = await store._retrying(attempt)
        return ended

    async def grace(self, now: datetime) -> int:
        """Give every live session at least its whole timeout from `now`: a node
        that starts may have been the only one, down while workers beat in vain,
        and they must have the time to reach it before any of them is judged
        lost. Returns how many sessions were given more time."""
        store = self._store
        c = worker_sessions.c

        async def attempt() -> int:
            async with store._write() as conn:
                timeouts = await conn.execute(select(c.timeout).where(c.status == LIVE).distinct())
                moved = 0
                for (timeout,) in timeouts.all():
                    until = self._clock(now) + timedelta(seconds=timeout)
                    done = await conn.execute(
                        update(worker_sessions)
                        .where(c.status == LIVE, c.timeout == timeout, c.expires_at < until)
                        .values(expires_at=until)
                    )
                    moved += int(done.rowcount)
                return moved

        moved: int = await store._retrying(attempt)
        return moved

    async def expired(self, now: datetime, limit: int = 100) -> list[WorkerSession]:
        c = worker_sessions.c
        rows = await self._store._rows(
            select(worker_sessions)
            .where(c.status == LIVE, c.expires_at < self._clock(now))
            .order_by(c.expires_at)
            .limit(limit)
        )
        return [_session(r) for r in rows]

    async def ended_with_runs(self, limit: int = 100) -> list[WorkerSession]:
        """Ended sessions the reaper has not finished with: some of their runs
        are still to be looked at."""
        c = worker_sessions.c
        rows = await self._store._rows(
            select(worker_sessions)
            .where(c.status != LIVE)
            .where(exists().where(worker_runs.c.session_id == c.session_id))
            .limit(limit)
        )
        return [_session(r) for r in rows]

    async def runs_of(self, session_id: str, limit: int = 1000) -> list[str]:
        """The open runs the session started tasks in (at most `limit`)."""
        w = worker_runs.c
        rows = await self._store._rows(
            select(w.run_id)
            .join(runs, runs.c.run_id == w.run_id)
            .where(w.session_id == session_id, runs.c.status == "open")
            .limit(limit)
        )
        return [r.run_id for r in rows]

    async def forget_session_runs(self, session_id: str) -> None:
        """Every row of the session: its open runs have all been looked at."""
        store = self._store

        async def attempt() -> None:
            async with store._write() as conn:
                await conn.execute(
                    delete(worker_runs).where(worker_runs.c.session_id == session_id)
                )

        await store._retrying(attempt)

    async def forget_runs(self, session_id: str, run_ids: list[str]) -> None:
        if not run_ids:
            return
        store = self._store

        async def attempt() -> None:
            async with store._write() as conn:
                await conn.execute(
                    delete(worker_runs).where(
                        worker_runs.c.session_id == session_id, worker_runs.c.run_id.in_(run_ids)
                    )
                )

        await store._retrying(attempt)

    async def record_runs(self, pairs: list[tuple[str, str]]) -> None:
        """(session, run) pairs whose tasks were started; known ones are skipped."""
        if not pairs:
            return
        rows = [{"session_id": s, "run_id": r} for s, r in sorted(set(pairs))]
        stmt = dialect.insert_ignoring(self._store.is_pg, worker_runs, ["session_id", "run_id"])
        store = self._store

        async def attempt() -> None:
            async with store._write() as conn:
                await conn.execute(stmt, rows)

        await store._retrying(attempt)

    async def find(
        self, namespace: str, task_list: str, ended_since: datetime, limit: int = 1000
    ) -> list[WorkerSession]:
        """Live sessions, then those ended since `ended_since`, of one namespace,
        optionally polling `task_list`, newest first."""
        c = worker_sessions.c
        newest = select(worker_sessions).where(c.namespace == namespace)
        newest = newest.order_by(c.registered_at.desc()).limit(limit)
        live = await self._store._rows(newest.where(c.status == LIVE))
        ended = await self._store._rows(newest.where(c.ended_at >= _naive(ended_since)))
        found = [_session(r) for r in [*live, *ended]]
        if task_list:
            found = [s for s in found if any(name == task_list for _, name in s.task_lists)]
        return found

    async def prune(self, now: datetime) -> None:
        """Delete sessions ended long ago, and rows of runs that have closed (or
        gone): nothing of those can be lost any more."""
        store = self._store
        c = worker_sessions.c
        run_open = exists().where(
            and_(runs.c.run_id == worker_runs.c.run_id, runs.c.status == "open")
        )

        async def attempt() -> None:
            async with store._write() as conn:
                await conn.execute(
                    delete(worker_sessions).where(
                        c.status != LIVE, c.ended_at < _naive(now - KEEP_ENDED)
                    )
                )
                await conn.execute(delete(worker_runs).where(~run_open))

        await store._retrying(attempt)


async def _notify(conn: AsyncConnection, store: StoreBase, session_id: str) -> None:
    await dialect.notify(
        conn, store.is_pg, CHANGES_CHANNEL, change(store.node_id, WORKER, session_id)
    )


def _ended(session: WorkerSession) -> FailedPrecondition:
    how = "was unregistered" if session.status == STOPPED else "has expired"
    return FailedPrecondition(f"worker session {session.session_id!r} {how}: register again")

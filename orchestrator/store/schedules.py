"""The schedules table: reads, and writes by compare-and-set on `version`.

The runner and the AdminService both change a schedule's row (the runner its
progress, an operator its spec, pause or pending triggers). Each reads the row,
computes the new one and writes it only if nobody wrote in between; the loser
reads again. Whether a slot's run was started is not decided here: its workflow
and request ids are (orchestrator.schedules.runner).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from orchestrator.engine.errors import Aborted, AlreadyExists, NotFound

from .reads import StoreBase
from .rows import aware
from .schema import runs, schedules

# How many of the latest runs a schedule remembers (describe shows them).
RECENT = 10
_CAS_ATTEMPTS = 8


@dataclass(frozen=True)
class RecentRun:
    slot: datetime
    workflow_id: str
    run_id: str
    started_at: datetime


@dataclass(frozen=True)
class ScheduleRow:
    namespace: str
    name: str
    workflow_type: str
    task_list: str
    input: bytes | None
    cron: str
    every: float | None
    timezone: str
    overlap: str
    catch_up_window: float
    jitter: float
    start_at: datetime | None
    end_at: datetime | None
    paused: bool
    note: str
    created_at: datetime
    updated_at: datetime
    last_slot: datetime | None = None
    buffered_slot: datetime | None = None
    pending: tuple[datetime, ...] = ()
    started: int = 0
    skipped: int = 0
    missed: int = 0
    recent: tuple[RecentRun, ...] = field(default_factory=tuple)
    version: int = 0
    due_at: datetime | None = None
    """When its next slot is due, as the runner last computed it; None: look at
    the next pass. (A row keeping a buffered slot is read every pass.)"""

    def with_recent(self, run: RecentRun) -> ScheduleRow:
        """The run remembered first (once), the oldest forgotten past RECENT."""
        others = tuple(r for r in self.recent if r.workflow_id != run.workflow_id)
        return replace(self, recent=((run, *others))[:RECENT])


def _naive(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=None) if value is not None else None


def _aware(value: datetime | None) -> datetime | None:
    return aware(value) if value is not None else None


def _values(row: ScheduleRow) -> dict[str, Any]:
    return {
        "namespace": row.namespace,
        "name": row.name,
        "workflow_type": row.workflow_type,
        "task_list": row.task_list,
        "input": row.input,
        "cron": row.cron,
        "every": row.every,
        "timezone": row.timezone,
        "overlap": row.overlap,
        "catch_up_window": row.catch_up_window,
        "jitter": row.jitter,
        "start_at": _naive(row.start_at),
        "end_at": _naive(row.end_at),
        "paused": row.paused,
        "note": row.note,
        "created_at": _naive(row.created_at),
        "updated_at": _naive(row.updated_at),
        "last_slot": _naive(row.last_slot),
        "buffered_slot": _naive(row.buffered_slot),
        "pending": json.dumps([p.isoformat() for p in row.pending]),
        "started": row.started,
        "skipped": row.skipped,
        "missed": row.missed,
        "recent": json.dumps(
            [
                {
                    "slot": r.slot.isoformat(),
                    "workflow_id": r.workflow_id,
                    "run_id": r.run_id,
                    "started_at": r.started_at.isoformat(),
                }
                for r in row.recent
            ]
        ),
        "version": row.version,
        "due_at": _naive(row.due_at),
    }


def _row(r: Any) -> ScheduleRow:
    m = r._mapping
    return ScheduleRow(
        namespace=m["namespace"],
        name=m["name"],
        workflow_type=m["workflow_type"],
        task_list=m["task_list"],
        input=m["input"],
        cron=m["cron"],
        every=m["every"],
        timezone=m["timezone"],
        overlap=m["overlap"],
        catch_up_window=m["catch_up_window"],
        jitter=m["jitter"],
        start_at=_aware(m["start_at"]),
        end_at=_aware(m["end_at"]),
        paused=bool(m["paused"]),
        note=m["note"],
        created_at=aware(m["created_at"]),
        updated_at=aware(m["updated_at"]),
        last_slot=_aware(m["last_slot"]),
        buffered_slot=_aware(m["buffered_slot"]),
        pending=tuple(datetime.fromisoformat(p) for p in json.loads(m["pending"])),
        started=m["started"],
        skipped=m["skipped"],
        missed=m["missed"],
        recent=tuple(
            RecentRun(
                slot=datetime.fromisoformat(r["slot"]),
                workflow_id=r["workflow_id"],
                run_id=r["run_id"],
                started_at=datetime.fromisoformat(r["started_at"]),
            )
            for r in json.loads(m["recent"])
        ),
        version=m["version"],
        due_at=_aware(m["due_at"]),
    )


def _key(namespace: str, name: str) -> Any:
    return (schedules.c.namespace == namespace) & (schedules.c.name == name)


class Schedules:
    """Reads and writes of the schedules table, through the store's
    connections and retries."""

    def __init__(self, store: StoreBase) -> None:
        self._store = store

    async def add(self, row: ScheduleRow) -> None:
        values = _values(row)
        store = self._store

        async def attempt() -> None:
            async with store._write() as conn:
                await conn.execute(insert(schedules).values(**values))

        try:
            await store._retrying(attempt, unique_ok=True)
        except IntegrityError as exc:
            raise AlreadyExists(
                f"schedule {row.name!r} already exists in namespace {row.namespace!r}"
            ) from exc

    async def get(self, namespace: str, name: str) -> ScheduleRow | None:
        found = await self._store._first(select(schedules).where(_key(namespace, name)))
        return _row(found) if found is not None else None

    async def find(self, namespace: str | None) -> list[ScheduleRow]:
        """Every schedule (None) or a namespace's, by name."""
        query = select(schedules).order_by(schedules.c.namespace, schedules.c.name)
        if namespace is not None:
            query = query.where(schedules.c.namespace == namespace)
        return [_row(r) for r in await self._store._rows(query)]

    async def due(self, now: datetime) -> list[ScheduleRow]:
        """The schedules the runner must look at by `now`, by name: those due,
        changed since it last looked, or keeping a slot until a run closes."""
        due_at, buffered = schedules.c.due_at, schedules.c.buffered_slot
        # Two reads, each on an index of its own (one OR of the three would
        # read every row).
        rows = await self._store._rows(
            select(schedules).where(or_(due_at.is_(None), due_at <= _naive(now)))
        )
        rows += await self._store._rows(select(schedules).where(buffered.is_not(None)))
        found = {(r.namespace, r.name): _row(r) for r in rows}
        return [found[key] for key in sorted(found)]

    async def next_due(self, after: datetime) -> datetime | None:
        """The earliest time after `after` that a schedule comes due."""
        due_at = schedules.c.due_at
        found = await self._store._first(select(func.min(due_at)).where(due_at > _naive(after)))
        return _aware(found[0]) if found is not None else None

    async def save(self, row: ScheduleRow) -> bool:
        """Write `row` if the stored one is still at `row.version` (it becomes
        version + 1); False if another writer came first (or it was deleted)."""
        values = _values(replace(row, version=row.version + 1))
        store = self._store

        async def attempt() -> bool:
            async with store._write() as conn:
                done = await conn.execute(
                    update(schedules)
                    .where(_key(row.namespace, row.name))
                    .where(schedules.c.version == row.version)
                    .values(**values)
                )
                return bool(done.rowcount)

        saved: bool = await store._retrying(attempt)
        return saved

    async def change(
        self, namespace: str, name: str, fn: Callable[[ScheduleRow], ScheduleRow]
    ) -> ScheduleRow:
        """Read, apply `fn`, write back; again if the runner wrote in between.
        NotFound if there is no such schedule; `fn` may raise to change nothing.
        The changed schedule is due at the next pass, whatever changed."""
        for _ in range(_CAS_ATTEMPTS):
            row = await self.get(namespace, name)
            if row is None:
                raise NotFound(f"no schedule {name!r} in namespace {namespace!r}")
            new = replace(fn(row), due_at=None)
            if await self.save(new):
                return replace(new, version=new.version + 1)
        raise Aborted(f"schedule {name!r} changed concurrently too often: try again")

    async def remove(self, namespace: str, name: str) -> None:
        store = self._store

        async def attempt() -> int:
            async with store._write() as conn:
                done = await conn.execute(delete(schedules).where(_key(namespace, name)))
                return int(done.rowcount)

        if not await store._retrying(attempt):
            raise NotFound(f"no schedule {name!r} in namespace {namespace!r}")

    async def run_statuses(self, run_ids: list[str]) -> dict[str, str]:
        """The status of each run still stored (a purged run is absent)."""
        if not run_ids:
            return {}
        rows = await self._store._rows(
            select(runs.c.run_id, runs.c.status).where(runs.c.run_id.in_(run_ids))
        )
        return {r.run_id: r.status for r in rows}

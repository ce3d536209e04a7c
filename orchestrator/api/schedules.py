"""AdminService's schedule calls: create, describe, list, update, pause,
unpause, trigger, backfill, delete. Everything is checked here, before the
row is written; the leading node's runner (orchestrator.schedules.runner)
does the starting."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import structlog
from google.protobuf.message import Message

from orchestrator.engine.errors import InvalidArgument, NotFound, ResourceExhausted
from orchestrator.schedules import runner as rules
from orchestrator.schedules.spec import Spec, SpecError, slot_text
from orchestrator.store.rows import utcnow
from orchestrator.store.schedules import ScheduleRow
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import schedules_pb2 as sc

from . import validate
from .common import STATUS_VALUES, Ctx, ServiceBase, timestamp
from .errors import grpc_errors

log = structlog.get_logger("weft.api")

# Room in a workflow id for "/<slot>" after the name.
NAME_LENGTH = 200
DEFAULT_CATCH_UP = timedelta(days=365)  # Temporal's default
MAX_BACKFILL = 1000
DEFAULT_NEXT, MAX_NEXT = 5, 100
_NOTE_LENGTH = 1000


def _time(msg: Message, field: str) -> datetime | None:
    if not msg.HasField(field):
        return None
    stamp = getattr(msg, field)
    return datetime.fromtimestamp(stamp.seconds + stamp.nanos / 1e9, UTC)


def _span(msg: Message, field: str, default: float) -> float:
    if not msg.HasField(field):
        return default
    return validate.seconds(f"schedule.{field}", getattr(msg, field))


def _checked(ns: str, s: sc.Schedule, now: datetime) -> ScheduleRow:
    """The schedule as a new row, or INVALID_ARGUMENT saying what is wrong."""
    name = validate.name("schedule.name", s.name, NAME_LENGTH)
    validate.name("schedule.workflow_type", s.workflow_type)
    validate.optional_name("schedule.task_list", s.task_list)
    if len(s.cron) > 255 or len(s.timezone) > 64:
        raise InvalidArgument("schedule.cron or schedule.timezone is too long")
    every = None
    if s.HasField("every"):
        every = validate.seconds("schedule.every", s.every, positive=True)
    try:
        Spec.of(s.cron, timedelta(seconds=every) if every is not None else None, s.timezone)
    except SpecError as exc:
        raise InvalidArgument(f"schedule: {exc}") from exc
    overlap = s.overlap or rules.SKIP
    if overlap not in rules.OVERLAP_POLICIES:
        raise InvalidArgument(
            f"schedule.overlap must be one of {', '.join(rules.OVERLAP_POLICIES)}, not {overlap!r}"
        )
    start_at, end_at = _time(s, "start_at"), _time(s, "end_at")
    if start_at is not None and end_at is not None and end_at < start_at:
        raise InvalidArgument("schedule.end_at is before schedule.start_at")
    if len(s.note) > _NOTE_LENGTH:
        raise InvalidArgument(f"schedule.note is longer than {_NOTE_LENGTH} characters")
    return ScheduleRow(
        namespace=ns,
        name=name,
        workflow_type=s.workflow_type,
        task_list=s.task_list,
        input=s.input.SerializeToString() if s.HasField("input") else None,
        cron=" ".join(s.cron.split()),
        every=every,
        timezone=s.timezone,
        overlap=overlap,
        catch_up_window=_span(s, "catch_up_window", DEFAULT_CATCH_UP.total_seconds()),
        jitter=_span(s, "jitter", 0.0),
        start_at=start_at,
        end_at=end_at,
        paused=s.paused,
        note=s.note,
        created_at=now,
        updated_at=now,
    )


def _schedule(row: ScheduleRow) -> sc.Schedule:
    out = sc.Schedule(
        name=row.name,
        workflow_type=row.workflow_type,
        task_list=row.task_list,
        cron=row.cron,
        timezone=row.timezone,
        overlap=row.overlap,
        paused=row.paused,
        note=row.note,
    )
    if row.input is not None:
        out.input.ParseFromString(row.input)
    if row.every is not None:
        out.every.FromTimedelta(timedelta(seconds=row.every))
    out.catch_up_window.FromTimedelta(timedelta(seconds=row.catch_up_window))
    out.jitter.FromTimedelta(timedelta(seconds=row.jitter))
    if row.start_at is not None:
        out.start_at.CopyFrom(timestamp(row.start_at))
    if row.end_at is not None:
        out.end_at.CopyFrom(timestamp(row.end_at))
    return out


def next_times(row: ScheduleRow, now: datetime, count: int) -> list[datetime]:
    after = max(now, row.last_slot or now)
    if row.start_at is not None and row.start_at > after:
        after = row.start_at - timedelta(microseconds=1)
    times = rules.spec_of(row).upcoming(after, count)
    return [t for t in times if row.end_at is None or t <= row.end_at]


class SchedulesAdmin(ServiceBase):
    runner: rules.ScheduleRunner | None = None  # set by the server: told of changes

    def _changed(self) -> None:
        if self.runner is not None:
            self.runner.poke()

    async def _describe(self, rows: list[ScheduleRow], count: int) -> list[sc.ScheduleDescription]:
        statuses = await self._store.schedules.run_statuses(
            [r.run_id for row in rows for r in row.recent]
        )
        now = utcnow()
        out = []
        for row in rows:
            d = sc.ScheduleDescription(
                schedule=_schedule(row),
                next_times=[timestamp(t) for t in next_times(row, now, count)],
                started=row.started,
                skipped=row.skipped,
                missed=row.missed,
                pending=len(row.pending),
                created_at=timestamp(row.created_at),
                updated_at=timestamp(row.updated_at),
            )
            for r in row.recent:
                d.recent_runs.add(
                    slot=timestamp(r.slot),
                    workflow_id=r.workflow_id,
                    run_id=r.run_id,
                    started_at=timestamp(r.started_at),
                    status=STATUS_VALUES.get(
                        statuses.get(r.run_id, ""), c.WORKFLOW_STATUS_UNSPECIFIED
                    ),
                )
            if row.last_slot is not None:
                d.last_slot.CopyFrom(timestamp(row.last_slot))
            if row.buffered_slot is not None:
                d.buffered_slot.CopyFrom(timestamp(row.buffered_slot))
            out.append(d)
        return out

    @grpc_errors
    async def CreateSchedule(
        self, req: sc.CreateScheduleRequest, ctx: Ctx
    ) -> sc.CreateScheduleResponse:
        ns = validate.namespace(req.namespace)
        row = _checked(ns, req.schedule, utcnow())
        await self._store.schedules.add(row)
        self._changed()
        log.info("schedule.created", namespace=ns, schedule=row.name)
        return sc.CreateScheduleResponse()

    @grpc_errors
    async def DescribeSchedule(
        self, req: sc.DescribeScheduleRequest, ctx: Ctx
    ) -> sc.DescribeScheduleResponse:
        ns = validate.namespace(req.namespace)
        name = validate.name("name", req.name, NAME_LENGTH)
        if not 0 <= req.next_count <= MAX_NEXT:
            raise InvalidArgument(f"next_count must be between 0 and {MAX_NEXT}")
        row = await self._store.schedules.get(ns, name)
        if row is None:
            raise NotFound(f"no schedule {name!r} in namespace {ns!r}")
        [d] = await self._describe([row], req.next_count or DEFAULT_NEXT)
        return sc.DescribeScheduleResponse(description=d)

    @grpc_errors
    async def ListSchedules(
        self, req: sc.ListSchedulesRequest, ctx: Ctx
    ) -> sc.ListSchedulesResponse:
        ns = validate.namespace(req.namespace)
        rows = await self._store.schedules.find(ns)
        return sc.ListSchedulesResponse(schedules=await self._describe(rows, 1))

    @grpc_errors
    async def UpdateSchedule(
        self, req: sc.UpdateScheduleRequest, ctx: Ctx
    ) -> sc.UpdateScheduleResponse:
        ns = validate.namespace(req.namespace)
        now = utcnow()
        new = _checked(ns, req.schedule, now)

        def apply(row: ScheduleRow) -> ScheduleRow:
            # From now on the new spec: its slots before now are not fired. The
            # old spec's slots in flight (waiting out their jitter, or due since
            # the runner's last pass) start at once.
            owed, missed = rules.owed_slots(row, now)
            return replace(
                new,
                paused=row.paused,
                note=row.note,
                created_at=row.created_at,
                last_slot=max(row.last_slot or now, now),
                buffered_slot=row.buffered_slot,
                pending=(*row.pending, *owed),
                started=row.started,
                skipped=row.skipped,
                missed=row.missed + missed,
                recent=row.recent,
                version=row.version,
            )

        await self._store.schedules.change(ns, new.name, apply)
        self._changed()
        log.info("schedule.updated", namespace=ns, schedule=new.name)
        return sc.UpdateScheduleResponse()

    async def _pause(self, ns: str, name: str, note: str, paused: bool) -> None:
        if len(note) > _NOTE_LENGTH:
            raise InvalidArgument(f"note is longer than {_NOTE_LENGTH} characters")
        now = utcnow()

        def apply(row: ScheduleRow) -> ScheduleRow:
            if paused:
                return replace(row, paused=True, note=note, updated_at=now)
            # Slots that came while paused are passed over, not caught up.
            last = max(row.last_slot or now, now) if row.paused else row.last_slot
            return replace(row, paused=False, note=note, updated_at=now, last_slot=last)

        await self._store.schedules.change(ns, name, apply)
        self._changed()
        log.info("schedule.paused" if paused else "schedule.unpaused", namespace=ns, schedule=name)

    @grpc_errors
    async def PauseSchedule(
        self, req: sc.PauseScheduleRequest, ctx: Ctx
    ) -> sc.PauseScheduleResponse:
        ns = validate.namespace(req.namespace)
        await self._pause(ns, validate.name("name", req.name, NAME_LENGTH), req.note, True)
        return sc.PauseScheduleResponse()

    @grpc_errors
    async def UnpauseSchedule(
        self, req: sc.UnpauseScheduleRequest, ctx: Ctx
    ) -> sc.UnpauseScheduleResponse:
        ns = validate.namespace(req.namespace)
        await self._pause(ns, validate.name("name", req.name, NAME_LENGTH), req.note, False)
        return sc.UnpauseScheduleResponse()

    async def _add_pending(self, ns: str, name: str, slots: list[datetime]) -> None:
        def apply(row: ScheduleRow) -> ScheduleRow:
            if len(row.pending) + len(slots) > rules.MAX_PENDING:
                raise ResourceExhausted(
                    f"schedule {name!r} has {len(row.pending)} slots waiting to start;"
                    f" at most {rules.MAX_PENDING} may wait"
                )
            return replace(row, pending=(*row.pending, *slots))

        await self._store.schedules.change(ns, name, apply)
        self._changed()

    @grpc_errors
    async def TriggerSchedule(
        self, req: sc.TriggerScheduleRequest, ctx: Ctx
    ) -> sc.TriggerScheduleResponse:
        ns = validate.namespace(req.namespace)
        name = validate.name("name", req.name, NAME_LENGTH)
        now = utcnow()
        slot = now.replace(microsecond=now.microsecond // 1000 * 1000)
        await self._add_pending(ns, name, [slot])
        log.info("schedule.triggered", namespace=ns, schedule=name, slot=slot_text(slot))
        return sc.TriggerScheduleResponse(
            slot=timestamp(slot), workflow_id=f"{name}/{slot_text(slot)}"
        )

    @grpc_errors
    async def BackfillSchedule(
        self, req: sc.BackfillScheduleRequest, ctx: Ctx
    ) -> sc.BackfillScheduleResponse:
        ns = validate.namespace(req.namespace)
        name = validate.name("name", req.name, NAME_LENGTH)
        start, end = _time(req, "start_time"), _time(req, "end_time")
        if start is None or end is None:
            raise InvalidArgument("start_time and end_time are required")
        if end < start:
            raise InvalidArgument("end_time is before start_time")
        row = await self._store.schedules.get(ns, name)
        if row is None:
            raise NotFound(f"no schedule {name!r} in namespace {ns!r}")
        slots = rules.spec_of(row).fire_times(
            start - timedelta(microseconds=1), end, MAX_BACKFILL + 1
        )
        if len(slots) > MAX_BACKFILL:
            raise InvalidArgument(
                f"the range holds more than {MAX_BACKFILL} slots: backfill it in parts"
            )
        await self._add_pending(ns, name, slots)
        log.info("schedule.backfilled", namespace=ns, schedule=name, slots=len(slots))
        return sc.BackfillScheduleResponse(slots=len(slots))

    @grpc_errors
    async def DeleteSchedule(
        self, req: sc.DeleteScheduleRequest, ctx: Ctx
    ) -> sc.DeleteScheduleResponse:
        ns = validate.namespace(req.namespace)
        name = validate.name("name", req.name, NAME_LENGTH)
        await self._store.schedules.remove(ns, name)
        log.info("schedule.deleted", namespace=ns, schedule=name)
        return sc.DeleteScheduleResponse()

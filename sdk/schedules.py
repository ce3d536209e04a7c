"""The AsyncClient's schedule calls (README "Schedules"), and what they return.

A schedule starts a run of a workflow type at each fire time of a cron (in a
time zone) or every fixed duration; each run's workflow id is
`<schedule>/<slot, UTC ISO 8601>`, so a slot never starts twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import schedules_pb2 as sc
from sdk.converter import PayloadConverter
from sdk.durations import duration
from sdk.events import rfc3339

_STATUS = {
    c.WORKFLOW_STATUS_OPEN: "open",
    c.WORKFLOW_STATUS_COMPLETED: "completed",
    c.WORKFLOW_STATUS_FAILED: "failed",
    c.WORKFLOW_STATUS_CANCELED: "canceled",
    c.WORKFLOW_STATUS_TERMINATED: "terminated",
    c.WORKFLOW_STATUS_CONTINUED_AS_NEW: "continued_as_new",
    c.WORKFLOW_STATUS_TIMED_OUT: "timed_out",
}
# What create and update take besides the name (None: unset / unchanged).
_FIELDS = (
    "workflow_type",
    "cron",
    "every",
    "timezone",
    "input",
    "task_list",
    "overlap",
    "catch_up_window",
    "jitter",
    "start_at",
    "end_at",
)


def _time(msg: Any, name: str) -> datetime | None:
    if not msg.HasField(name):
        return None
    stamp: Timestamp = getattr(msg, name)
    return stamp.ToDatetime(tzinfo=UTC)


def _stamp(value: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(value if value.tzinfo else value.replace(tzinfo=UTC))
    return out


def _iso(value: datetime | None) -> str | None:
    return rfc3339(value) if value is not None else None


@dataclass(frozen=True)
class ScheduleRun:
    """A run a schedule started; `status` is "" once the run is purged."""

    slot: datetime
    workflow_id: str
    run_id: str
    started_at: datetime
    status: str

    def to_json(self) -> dict[str, Any]:
        return {
            "slot": rfc3339(self.slot),
            "workflow_id": self.workflow_id,
            "run_id": self.run_id,
            "started_at": rfc3339(self.started_at),
            "status": self.status,
        }


@dataclass(frozen=True)
class ScheduleDescription:
    name: str
    workflow_type: str
    task_list: str
    input: Any
    cron: str
    every: timedelta | None
    timezone: str
    overlap: str
    catch_up_window: timedelta
    jitter: timedelta
    start_at: datetime | None
    end_at: datetime | None
    paused: bool
    note: str
    next_times: list[datetime] = field(default_factory=list)
    recent_runs: list[ScheduleRun] = field(default_factory=list)
    started: int = 0
    skipped: int = 0
    missed: int = 0
    last_slot: datetime | None = None
    buffered_slot: datetime | None = None
    pending: int = 0

    @classmethod
    def from_proto(
        cls, d: sc.ScheduleDescription, converter: PayloadConverter
    ) -> ScheduleDescription:
        s = d.schedule
        return cls(
            name=s.name,
            workflow_type=s.workflow_type,
            task_list=s.task_list,
            input=converter.decode(s.input) if s.HasField("input") else None,
            cron=s.cron,
            every=s.every.ToTimedelta() if s.HasField("every") else None,
            timezone=s.timezone,
            overlap=s.overlap,
            catch_up_window=s.catch_up_window.ToTimedelta(),
            jitter=s.jitter.ToTimedelta(),
            start_at=_time(s, "start_at"),
            end_at=_time(s, "end_at"),
            paused=s.paused,
            note=s.note,
            next_times=[t.ToDatetime(tzinfo=UTC) for t in d.next_times],
            recent_runs=[
                ScheduleRun(
                    slot=r.slot.ToDatetime(tzinfo=UTC),
                    workflow_id=r.workflow_id,
                    run_id=r.run_id,
                    started_at=r.started_at.ToDatetime(tzinfo=UTC),
                    status=_STATUS.get(r.status, ""),
                )
                for r in d.recent_runs
            ],
            started=d.started,
            skipped=d.skipped,
            missed=d.missed,
            last_slot=_time(d, "last_slot"),
            buffered_slot=_time(d, "buffered_slot"),
            pending=d.pending,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "workflow_type": self.workflow_type,
            "task_list": self.task_list,
            "input": self.input,
            "cron": self.cron,
            "every": self.every.total_seconds() if self.every is not None else None,
            "timezone": self.timezone,
            "overlap": self.overlap,
            "catch_up_window": self.catch_up_window.total_seconds(),
            "jitter": self.jitter.total_seconds(),
            "start_at": _iso(self.start_at),
            "end_at": _iso(self.end_at),
            "paused": self.paused,
            "note": self.note,
            "next_times": [rfc3339(t) for t in self.next_times],
            "recent_runs": [r.to_json() for r in self.recent_runs],
            "started": self.started,
            "skipped": self.skipped,
            "missed": self.missed,
            "last_slot": _iso(self.last_slot),
            "buffered_slot": _iso(self.buffered_slot),
            "pending": self.pending,
        }


class ScheduleCalls:
    """Mixed into `AsyncClient`, which provides `namespace`, `converter` and `rpc`."""

    namespace: str
    converter: PayloadConverter

    async def rpc(self, method: str, request: Message, *, timeout: timedelta | None = None) -> Any:
        raise NotImplementedError

    def _apply(self, s: sc.Schedule, changes: dict[str, Any]) -> sc.Schedule:
        unknown = set(changes) - set(_FIELDS)
        if unknown:
            raise TypeError(f"unknown schedule fields: {', '.join(sorted(unknown))}")
        for key, value in changes.items():
            if value is None:
                continue
            if key in ("every", "catch_up_window", "jitter"):
                getattr(s, key).CopyFrom(duration(value))
            elif key in ("start_at", "end_at"):
                getattr(s, key).CopyFrom(_stamp(value))
            elif key == "input":
                s.input.CopyFrom(self.converter.encode(value))
            else:
                setattr(s, key, value)
        # One of cron and every: the one given replaces the other.
        if changes.get("cron"):
            s.ClearField("every")
        elif changes.get("every") is not None:
            s.cron = ""
        return s

    async def create_schedule(
        self,
        name: str,
        *,
        workflow_type: str,
        cron: str | None = None,
        every: timedelta | None = None,
        timezone: str | None = None,
        input: Any = None,
        task_list: str | None = None,
        overlap: str | None = None,
        catch_up_window: timedelta | None = None,
        jitter: timedelta | None = None,
        start_at: datetime | None = None,
        end_at: datetime | None = None,
        paused: bool = False,
        note: str = "",
    ) -> None:
        """Create a schedule: exactly one of `cron` (5 fields, in `timezone`) and `every`."""
        s = self._apply(
            sc.Schedule(name=name, paused=paused, note=note),
            {
                "workflow_type": workflow_type,
                "cron": cron,
                "every": every,
                "timezone": timezone,
                "input": input,
                "task_list": task_list,
                "overlap": overlap,
                "catch_up_window": catch_up_window,
                "jitter": jitter,
                "start_at": start_at,
                "end_at": end_at,
            },
        )
        await self.rpc(
            "CreateSchedule", sc.CreateScheduleRequest(namespace=self.namespace, schedule=s)
        )

    async def describe_schedule(self, name: str, *, next_count: int = 0) -> ScheduleDescription:
        """The schedule, its next fire times, its latest runs and their outcome, its counts."""
        resp = await self.rpc(
            "DescribeSchedule",
            sc.DescribeScheduleRequest(namespace=self.namespace, name=name, next_count=next_count),
        )
        return ScheduleDescription.from_proto(resp.description, self.converter)

    async def list_schedules(self) -> list[ScheduleDescription]:
        resp = await self.rpc("ListSchedules", sc.ListSchedulesRequest(namespace=self.namespace))
        return [ScheduleDescription.from_proto(d, self.converter) for d in resp.schedules]

    async def update_schedule(self, name: str, **changes: Any) -> None:
        """Change some of what `create_schedule` set (the others stay); the new
        spec applies from now on. Pause state: `pause_schedule`/`unpause_schedule`."""
        resp = await self.rpc(
            "DescribeSchedule", sc.DescribeScheduleRequest(namespace=self.namespace, name=name)
        )
        s = self._apply(resp.description.schedule, changes)
        await self.rpc(
            "UpdateSchedule", sc.UpdateScheduleRequest(namespace=self.namespace, schedule=s)
        )

    async def pause_schedule(self, name: str, *, note: str = "") -> None:
        await self.rpc(
            "PauseSchedule",
            sc.PauseScheduleRequest(namespace=self.namespace, name=name, note=note),
        )

    async def unpause_schedule(self, name: str, *, note: str = "") -> None:
        """Go on from now: the slots that came while paused are not started."""
        await self.rpc(
            "UnpauseSchedule",
            sc.UnpauseScheduleRequest(namespace=self.namespace, name=name, note=note),
        )

    async def trigger_schedule(self, name: str) -> str:
        """Start a run now (also when paused); returns its workflow id."""
        resp = await self.rpc(
            "TriggerSchedule", sc.TriggerScheduleRequest(namespace=self.namespace, name=name)
        )
        return str(resp.workflow_id)

    async def backfill_schedule(self, name: str, start: datetime, end: datetime) -> int:
        """Start the runs of the slots in [start, end] not started before; returns
        how many slots the range holds (at most 1000)."""
        resp = await self.rpc(
            "BackfillSchedule",
            sc.BackfillScheduleRequest(
                namespace=self.namespace,
                name=name,
                start_time=_stamp(start),
                end_time=_stamp(end),
            ),
        )
        return int(resp.slots)

    async def delete_schedule(self, name: str) -> None:
        """Delete the schedule; the runs it started stay."""
        await self.rpc(
            "DeleteSchedule", sc.DeleteScheduleRequest(namespace=self.namespace, name=name)
        )

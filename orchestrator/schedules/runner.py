"""The schedule runner: one asyncio task on the leading node that starts the
runs schedules ask for.

Each pass reads the schedules that are due (each row keeps when its next slot
is due; a change by an operator, or a buffered slot waiting for a run to close,
makes it due at once) and, for each, the fire times since the last one it
handled. A slot later than its catch-up window is counted as missed; the
others go through the overlap policy and are started through the same path as
StartWorkflow, with the workflow id `<schedule>/<slot, UTC ISO>` and a fixed
request id. That pair is the one guarantee that a slot starts at most once:
after a kill -9 between the start and the row's update, or when two nodes both
run a pass, the second start of a slot answers with the first one's run and
starts nothing. The row's `last_slot` moves only after the starts before it
committed, so a crash never loses a slot either (seed 003's recycle).

Overlap policies, as Temporal's (a run "of the schedule" is one of its recent
runs still open):
- allow: start regardless;
- skip: do not start (counted as skipped);
- buffer-one: keep this slot and start it when the open run closes; a slot that
  comes while one is kept is skipped;
- cancel-previous: request cancellation of the open run and start this slot
  when it has closed (kept as buffer-one keeps one);
- terminate-previous: terminate the open run and start this slot at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import structlog
from prometheus_client import Counter

from orchestrator.engine import external
from orchestrator.engine.errors import Aborted, AlreadyExists, EngineError, Unavailable
from orchestrator.store.rows import utcnow
from orchestrator.store.schedules import RecentRun, ScheduleRow
from orchestrator.store.store import Store
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s

from .spec import Spec, SpecError, jitter_for, slot_text

log = structlog.get_logger("weft.schedules")

ALLOW, SKIP, BUFFER_ONE = "allow", "skip", "buffer-one"
CANCEL_PREVIOUS, TERMINATE_PREVIOUS = "cancel-previous", "terminate-previous"
OVERLAP_POLICIES = (SKIP, BUFFER_ONE, ALLOW, CANCEL_PREVIOUS, TERMINATE_PREVIOUS)
# Seconds between passes (at most): a trigger or a buffered start waits this long.
PASS = 1.0
# A slot is on time when a pass comes to it within one pass of its start time:
# the catch-up window counts from there (a window of zero still starts the
# slots that come due while the service is up).
ON_TIME = timedelta(seconds=PASS)
# Slots looked at per schedule and pass: a long outage is worked through over
# several passes instead of one that holds the loop.
SLOTS_PER_PASS = 500
# Slots that may wait to start at once (triggers, backfills, an update's owed slots).
MAX_PENDING = 1000
# Every start of a slot carries this request id; with the slot's workflow id it
# makes a second start of the slot answer with the first one's run.
REQUEST_ID = "schedule"
NEVER = datetime.max.replace(tzinfo=UTC)

Start = Callable[[s.StartWorkflowRequest], Awaitable[tuple[str, bool]]]


def spec_of(row: ScheduleRow) -> Spec:
    every = timedelta(seconds=row.every) if row.every is not None else None
    return Spec.of(row.cron, every, row.timezone)


def workflow_id(row: ScheduleRow, slot: datetime) -> str:
    return f"{row.name}/{slot_text(slot)}"


def start_time(row: ScheduleRow, slot: datetime) -> datetime:
    """When a slot's run starts: the slot, delayed by its share of the jitter."""
    key = f"{row.namespace}/{row.name}/{slot_text(slot)}"
    try:
        return slot + jitter_for(key, timedelta(seconds=row.jitter))
    except OverflowError:
        # Jittered past the year 9999, where dates end: a time that never comes
        # (raising would fail this schedule's every pass, and log each second).
        return NEVER


def cursor_of(row: ScheduleRow) -> datetime:
    """The time after which the row's slots are still to be handled."""
    cursor = row.last_slot or row.created_at
    if row.start_at is not None and row.start_at > cursor:
        cursor = row.start_at - timedelta(microseconds=1)  # the start time may fire
    return cursor


def _window(row: ScheduleRow) -> timedelta:
    """How late a slot's start may be and still be started (counted from on time)."""
    return timedelta(seconds=row.catch_up_window) + ON_TIME


def owed_slots(row: ScheduleRow, now: datetime) -> tuple[list[datetime], int]:
    """The slots in flight when the row's spec changes: come by `now`, not yet
    started only because they wait out their jitter or came since the runner's
    last pass (so at most the jitter and two passes ago), with how many of them
    are past their catch-up window. Older slots that no pass reached (no node
    led) are passed over by a change of spec, as ever. A paused schedule, and
    one whose stored spec no longer parses (its zone was removed), owe none.
    A slot already pending is not owed again, and those the pending list has no
    room for (MAX_PENDING) are counted missed."""
    if row.paused:
        return [], 0
    try:
        spec = spec_of(row)
    except SpecError:
        return [], 0
    in_flight = now - timedelta(seconds=row.jitter) - 2 * ON_TIME
    cursor, window = max(cursor_of(row), in_flight), _window(row)
    owed: list[datetime] = []
    missed = 0
    for _ in range(SLOTS_PER_PASS):
        slot = spec.next_after(cursor)
        if slot is None or slot > now or (row.end_at is not None and slot > row.end_at):
            break
        if now - start_time(row, slot) > window:
            missed += 1
        else:
            owed.append(slot)
        cursor = slot
    owed = [slot for slot in owed if slot not in row.pending]
    room = max(0, MAX_PENDING - len(row.pending))
    return owed[:room], missed + len(owed[room:])


class ScheduleRunner:
    def __init__(
        self,
        store: Store,
        start: Start,
        leads: Callable[[], bool],
        clock: Callable[[], datetime] = utcnow,
        slots: Counter | None = None,
    ) -> None:
        self._slots = slots
        self._store = store
        self._start = start
        self._leads = leads
        self._clock = clock
        self._poke = asyncio.Event()

    def poke(self) -> None:
        """A schedule changed here (made, triggered, unpaused): pass now."""
        self._poke.set()

    async def run(self) -> None:
        while True:
            wait = PASS
            if self._leads():
                try:
                    wait = await self.pass_once()
                except Exception as exc:  # the database may be away: try again next pass
                    log.warning("schedules.pass_failed", error=str(exc)[:200])
            self._poke.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), max(0.01, min(wait, PASS)))

    async def pass_once(self) -> float:
        """Handle every schedule that is due (or changed) once; seconds until
        the next one is due."""
        wait = PASS
        began = self._clock()
        for row in await self._store.schedules.due(began):
            now = self._clock()
            try:
                new, due = await self._handle(row, now)
            except Exception as exc:  # one schedule's trouble does not stop the others
                log.warning(
                    "schedules.handle_failed",
                    namespace=row.namespace,
                    schedule=row.name,
                    error=str(exc)[:200],
                )
                continue  # (still due: the next pass tries it again)
            new = replace(new, due_at=due if due is not None else NEVER)
            # Lost to another writer, the next pass works from what it wrote,
            # and starts already made are found again by their ids.
            if new != row and await self._store.schedules.save(new):
                self._count(row, new)
            if due is not None:
                wait = min(wait, (due - self._clock()).total_seconds())
        # The ones not looked at: the earliest of them to come due.
        later = await self._store.schedules.next_due(after=began)
        if later is not None:
            wait = min(wait, (later - self._clock()).total_seconds())
        return wait

    def _count(self, before: ScheduleRow, after: ScheduleRow) -> None:
        if self._slots is None:
            return
        for outcome in ("started", "skipped", "missed"):
            added = getattr(after, outcome) - getattr(before, outcome)
            if added > 0:
                self._slots.labels(outcome).inc(added)

    async def _handle(self, row: ScheduleRow, now: datetime) -> tuple[ScheduleRow, datetime | None]:
        """The row after this pass, and when its next slot is due."""
        new, slots, due = self._due_slots(row, now)
        slots.extend(row.pending)  # trigger and backfill: now, whatever the window
        new = replace(new, pending=())
        if not slots and new.buffered_slot is None:
            return new, due
        statuses = await self._store.schedules.run_statuses([r.run_id for r in row.recent])
        running = [r for r in row.recent if statuses.get(r.run_id) == "open"]
        if new.buffered_slot is not None and not running:
            new, run = await self._fire(new, new.buffered_slot)
            new = replace(new, buffered_slot=None)
            running = [run] if run is not None else []
        for slot in slots:
            policy = row.overlap
            if not running or policy == ALLOW:
                new, run = await self._fire(new, slot)
                running += [run] if run is not None else []
            elif policy == SKIP:
                new = replace(new, skipped=new.skipped + 1)
            elif policy == TERMINATE_PREVIOUS:
                await self._stop(row, running, terminate=True)
                new, run = await self._fire(new, slot)
                running = [run] if run is not None else []
            else:  # buffer-one, cancel-previous: keep one to start when it closes
                if policy == CANCEL_PREVIOUS:
                    await self._stop(row, running, terminate=False)
                if new.buffered_slot is None:
                    new = replace(new, buffered_slot=slot)
                elif policy == CANCEL_PREVIOUS:  # the newest is kept, the older skipped
                    new = replace(new, buffered_slot=slot, skipped=new.skipped + 1)
                else:
                    new = replace(new, skipped=new.skipped + 1)
        return new, due

    def _due_slots(
        self, row: ScheduleRow, now: datetime
    ) -> tuple[ScheduleRow, list[datetime], datetime | None]:
        """The scheduled slots to start now; the missed ones are counted and passed."""
        if row.paused:
            return row, [], None
        spec, cursor, window = spec_of(row), cursor_of(row), _window(row)
        slots: list[datetime] = []
        handled, missed, due = row.last_slot, 0, None
        for _ in range(SLOTS_PER_PASS):
            slot = spec.next_after(cursor)
            if slot is None or (row.end_at is not None and slot > row.end_at):
                break
            at = start_time(row, slot)
            if at > now:
                due = at
                break
            if now - at > window:
                missed += 1
            else:
                slots.append(slot)
            handled = cursor = slot
        else:
            due = now  # more slots than one pass takes: on at once
        if missed:
            log.warning("schedule.missed", namespace=row.namespace, schedule=row.name, slots=missed)
        return replace(row, last_slot=handled, missed=row.missed + missed), slots, due

    async def _fire(self, row: ScheduleRow, slot: datetime) -> tuple[ScheduleRow, RecentRun | None]:
        """Start the slot's run (or find it started before); the run if it is open."""
        wid = workflow_id(row, slot)
        req = s.StartWorkflowRequest(
            namespace=row.namespace,
            workflow_id=wid,
            workflow_type=c.WorkflowType(name=row.workflow_type),
            task_list=row.task_list,
            identity=f"schedule {row.name}",
            request_id=REQUEST_ID,
        )
        if row.input is not None:
            req.input.ParseFromString(row.input)
        try:
            run_id, started = await self._start(req)
        except AlreadyExists:
            # The slot's id is taken by an open run started some other way: it
            # is this slot's run all the same.
            found = await self._store.open_run(row.namespace, wid)
            if found is None:
                raise
            run_id, started = found, False
        except (Unavailable, Aborted):
            raise  # the database: the slot is tried again next pass
        except EngineError as exc:
            # The start itself is refused (the type has no task list, ...):
            # retrying cannot help, so the slot is counted as skipped.
            log.warning(
                "schedule.start_refused", namespace=row.namespace, schedule=row.name, error=str(exc)
            )
            return replace(row, skipped=row.skipped + 1), None
        if started:
            log.info("schedule.started", namespace=row.namespace, workflow_id=wid, run_id=run_id)
        # Counted once: by the pass that started it, or by the first pass whose
        # row does not know it yet (the starter crashed, or lost the row's
        # compare-and-set to this one).
        known = any(r.workflow_id == wid for r in row.recent)
        run = RecentRun(slot=slot, workflow_id=wid, run_id=run_id, started_at=self._clock())
        row = row.with_recent(run)
        return replace(row, started=row.started + (0 if known else 1)), run

    async def _stop(self, row: ScheduleRow, running: list[RecentRun], *, terminate: bool) -> None:
        reason = f"schedule {row.name}: a new run replaces it ({row.overlap})"
        identity = f"schedule {row.name}"
        for run in running:
            try:
                if terminate:
                    await self._store.transact(
                        run.run_id, lambda t: external.terminate(t, reason, None, identity)
                    )
                else:
                    await self._store.transact(
                        run.run_id, lambda t: external.request_cancel(t, reason, identity)
                    )
            except (Unavailable, Aborted):
                raise
            except EngineError:
                pass  # closed meanwhile: nothing to stop

"""Scenario 5, dispatch latency: with the decider's and the runner's polls
already waiting, how long from a signal to `DeciderStarted`, and from
`ActivityScheduled` to `ActivityStarted` — both on the server's own clock,
as multiples of a bare grpc.aio round trip measured in the same scenario."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from bench import echo
from bench.drive import wait_closed
from bench.rig import Rig
from bench.stats import ratio, spread
from bench.workload import TASK_LIST
from sdk import Event

SETTLE = 0.3  # after each hand-off: the workers answer, then poll again and wait


def _ms(later: Event, earlier: Event) -> float:
    return (later.timestamp - earlier.timestamp).total_seconds() * 1000


def latencies(events: list[Event]) -> tuple[list[float], list[float]]:
    """(signal → next DeciderStarted, ActivityScheduled → its ActivityStarted), in ms."""
    signal_to_decider: list[float] = []
    pending_signal: Event | None = None
    scheduled: dict[int, Event] = {}
    schedule_to_start: list[float] = []
    for event in events:
        if event.type == "Signal" and event.get("signal_name") == "go":
            pending_signal = pending_signal or event
        elif event.type == "DeciderStarted" and pending_signal is not None:
            signal_to_decider.append(_ms(event, pending_signal))
            pending_signal = None
        elif event.type == "ActivityScheduled":
            scheduled[event.event_id] = event
        elif event.type == "ActivityStarted":
            origin = scheduled.get(int(event.get("scheduled_event_id", 0)))
            if origin is not None:
                schedule_to_start.append(_ms(event, origin))
    return signal_to_decider, schedule_to_start


async def _round_trip(rig: Rig) -> float:
    result = await echo.load(
        rig.echo_address, 1, rig.profile.limit_seconds, rig.profile.limit_warmup, rig.echo.cpu
    )
    return result.p50_ms


async def run(rig: Rig, log: Any) -> dict[str, Any]:
    client = rig.pg.client
    workflow_id = f"bench-dispatch-{uuid.uuid4().hex[:6]}"
    await client.start_workflow(
        "bench-dispatch",
        None,
        workflow_id=workflow_id,
        task_list=TASK_LIST,
        execution_timeout=timedelta(hours=1),
    )
    await asyncio.sleep(SETTLE)
    # The reference round trip before, between the halves, and after the signals.
    round_trips = [await _round_trip(rig)]
    repeats = rig.profile.dispatch_repeats
    log(f"dispatch: {repeats} signals")
    for n in range(repeats):
        await client.signal(workflow_id, "go", n)
        await asyncio.sleep(SETTLE)
        if n == repeats // 2:
            round_trips.append(await _round_trip(rig))
    round_trips.append(await _round_trip(rig))
    await client.signal(workflow_id, "stop")
    await wait_closed(client, workflow_id)
    signal_to_decider, schedule_to_start = latencies(await client.history(workflow_id))
    rtt = spread(round_trips)["median"]
    return {
        "idle_pollers": True,
        "bare_round_trip_p50_ms": spread(round_trips),
        "signal_to_decider_started_ms": spread(signal_to_decider),
        "activity_scheduled_to_started_ms": spread(schedule_to_start),
        "ratio_signal_to_decider_over_round_trip": spread(
            [ratio(v, rtt) for v in signal_to_decider]
        ),
        "ratio_schedule_to_start_over_round_trip": spread(
            [ratio(v, rtt) for v in schedule_to_start]
        ),
    }

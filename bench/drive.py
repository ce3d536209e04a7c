"""Drive N workflows through a Weft server with a fixed number in flight, and
read the hand-off latencies back from their histories.

Completion comes out of band (a UDP datagram from the last activity, see
`bench.workload`), so the driver adds only one StartWorkflow call per
workflow to the server's load."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bench.stats import percentile
from sdk import AsyncClient, Event

DONE_TIMEOUT = 120.0
SAMPLE_HISTORIES = 60  # per batch: enough for a p99 of ~300 hand-offs


class Completions(asyncio.DatagramProtocol):
    """Keys the workflows' last activities report, as futures the driver awaits."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[None]] = {}
        self.address = ""

    @classmethod
    async def open(cls) -> Completions:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_datagram_endpoint(cls, local_addr=("127.0.0.1", 0))
        host, port = transport.get_extra_info("sockname")[:2]
        protocol.address = f"{host}:{port}"
        return protocol

    def expect(self, key: str) -> asyncio.Future[None]:
        future = self.waiting[key] = asyncio.get_running_loop().create_future()
        return future

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        future = self.waiting.pop(data.decode(), None)
        if future is not None and not future.done():
            future.set_result(None)


@dataclass
class Batch:
    """One timed batch of workflows."""

    workflow_ids: list[str]
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


async def run_batch(
    client: AsyncClient,
    completions: Completions,
    *,
    workflow_type: str,
    task_list: str,
    workflows: int,
    steps: int,
    inflight: int,
    prefix: str,
) -> Batch:
    """`inflight` lanes, each starting its next workflow when the previous one's
    last activity is done; the batch ends when every workflow has closed."""
    counter = itertools.count()
    ids: list[str] = []
    last_per_lane: list[str] = []

    async def lane() -> None:
        key = ""
        while (i := next(counter)) < workflows:
            key = f"{prefix}-{i}"
            ids.append(key)
            done = completions.expect(key)
            payload = {"k": steps, "notify": completions.address, "key": key}
            await client.start_workflow(
                workflow_type,
                payload,
                workflow_id=key,
                task_list=task_list,
                execution_timeout=timedelta(minutes=30),
            )
            await asyncio.wait_for(done, DONE_TIMEOUT)
        if key:
            last_per_lane.append(key)

    t0 = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(inflight)))
    # The last activity of each lane has run; its close decision may still be on
    # its way. The batch is over when those runs are closed too.
    for key in last_per_lane:
        await wait_closed(client, key)
    return Batch(ids, time.perf_counter() - t0)


async def wait_closed(client: AsyncClient, workflow_id: str) -> None:
    deadline = time.monotonic() + DONE_TIMEOUT
    while (await client.describe(workflow_id)).info.status == "open":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{workflow_id} still open after {DONE_TIMEOUT}s")
        await asyncio.sleep(0.002)


@dataclass
class HandOffs:
    """Latencies between events of the server's own clock, in milliseconds."""

    schedule_to_start: list[float] = field(default_factory=list)
    activity_to_next: list[float] = field(default_factory=list)
    decision_leg: list[float] = field(default_factory=list)
    """DeciderStarted -> DeciderCompleted: the commit that started the decision
    task, its way to the decider and back, and the server's handling of the
    answer up to its transition."""
    activity_leg: list[float] = field(default_factory=list)
    """ActivityStarted -> ActivitySuccess: the same for an activity task."""

    def summary(self) -> dict[str, float]:
        return {
            "schedule_to_start_p50_ms": percentile(self.schedule_to_start, 50),
            "schedule_to_start_p99_ms": percentile(self.schedule_to_start, 99),
            "activity_to_next_p50_ms": percentile(self.activity_to_next, 50),
            "activity_to_next_p99_ms": percentile(self.activity_to_next, 99),
            "decision_leg_p50_ms": percentile(self.decision_leg, 50),
            "activity_leg_p50_ms": percentile(self.activity_leg, 50),
        }


def _ms(later: Event, earlier: Event) -> float:
    return (later.timestamp - earlier.timestamp).total_seconds() * 1000


def hand_offs(events: list[Event], into: HandOffs) -> None:
    """Schedule-to-start of each activity, from each activity's success to
    the start of the next one (a decision task and a dispatch in between), and
    each task's leg, from its start to the transition its answer made."""
    by_id = {e.event_id: e for e in events}
    started: list[Event] = []
    succeeded: list[Event] = []
    for event in events:
        begun = by_id.get(int(event.get("started_event_id", 0)))
        if begun is not None and event.type == "DeciderCompleted":
            into.decision_leg.append(_ms(event, begun))
        elif begun is not None and event.type == "ActivitySuccess":
            into.activity_leg.append(_ms(event, begun))
        if event.type == "ActivityStarted":
            scheduled = by_id.get(int(event.get("scheduled_event_id", 0)))
            if scheduled is not None:
                into.schedule_to_start.append(_ms(event, scheduled))
            started.append(event)
        elif event.type == "ActivitySuccess":
            succeeded.append(event)
    for done, following in zip(succeeded, started[1:], strict=False):
        into.activity_to_next.append(_ms(following, done))


async def sample_hand_offs(
    client: AsyncClient, workflow_ids: list[str]
) -> tuple[HandOffs, list[int]]:
    """Hand-offs of a random sample of the batch (read after the timed window),
    and the number of decision tasks each sampled run took."""
    out = HandOffs()
    decisions: list[int] = []
    sample = random.sample(workflow_ids, min(SAMPLE_HISTORIES, len(workflow_ids)))
    for workflow_id in sample:
        events = await client.history(workflow_id)
        hand_offs(events, out)
        decisions.append(sum(1 for e in events if e.type == "DeciderCompleted"))
    return out, decisions

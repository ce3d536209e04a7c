"""Scenario 4, history growth: what one decision task costs when the run's
history holds 10, 1,000 or 10,000 events.

The driver is the decider here (an instrumented copy of the SDK worker's
steps), so each part is timed on its own: the poll that hands out the task,
the history pages after the first, the decider (events decoded, the task
folded, `decide`), and the answer. The histories are grown with markers and signals
while no decider polls; each repeat then adds one signal (4 events)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from datetime import timedelta
from typing import Any

from bench.rig import Rig
from bench.stats import ratio, spread
from sdk import AsyncClient, Decider, DecisionTask
from sdk.api.weft.v1 import service_pb2 as s
from sdk.decider import Decision
from sdk.events import event_from_proto

# Polled by this scenario only, never by `weft decider`; one list per history
# size, since a poll cannot ask for a particular run.
TASK_LIST = "bench-growth"
SIGNAL_CONCURRENCY = 16
MARKERS_PER_TASK = 500
MIN_MARKERS = 8
FRESH_RUN_BELOW = 100  # small histories: a new run per repeat, so they stay small


class Growth(Decider):
    """Reads the whole history, as every decider does, and decides nothing."""

    workflow_type = "bench-growth"
    task_list = TASK_LIST

    def decide(self, task: DecisionTask) -> None:
        _ = (task.activities, task.timers, task.signals(), task.input)


def task_list(size: int) -> str:
    return f"{TASK_LIST}-{size}"


async def _grow(client: AsyncClient, events: int) -> str:
    """A run whose next decision task (pending on return) will carry about
    `events` events.

    A run takes at most 10,000 signals, so the bulk is markers: each round
    answers the pending task with up to MARKERS_PER_TASK `RecordMarker`
    decisions, then a signal schedules the next task. Signals fill the rest."""
    workflow_id = f"bench-growth-{events}-{uuid.uuid4().hex[:6]}"
    await client.start_workflow(
        "bench-growth",
        {"size": events},
        workflow_id=workflow_id,
        task_list=task_list(events),
        execution_timeout=timedelta(hours=1),
        decider_timeout=timedelta(minutes=5),
    )
    # So far: WorkflowStarted, DeciderScheduled. The poll that takes the pending
    # task adds DeciderStarted, so `have + 1` is what that task would carry.
    have = 2
    # A round adds DeciderStarted, the markers, DeciderCompleted, Signal, DeciderScheduled.
    while events - (have + 1) >= 4 + MIN_MARKERS:
        markers = min(MARKERS_PER_TASK, events - (have + 1) - 4)
        resp = await _poll(client, events)
        marker = Decision("RecordMarker", {"marker_name": "grow", "details": {"pad": "x" * 32}})
        await client.rpc(
            "RespondDecisionTaskCompleted",
            s.RespondDecisionTaskCompletedRequest(
                task_token=resp.task_token,
                decisions=[marker.to_proto(client.converter)] * markers,
                identity="bench-growth",
            ),
        )
        await client.signal(workflow_id, "grow", have)
        have += 4 + markers
    remaining = iter(range(events - (have + 1)))

    async def sender() -> None:
        for n in remaining:
            await client.signal(workflow_id, "grow", n, request_id=f"{workflow_id}-{n}")

    await asyncio.gather(*(sender() for _ in range(SIGNAL_CONCURRENCY)))
    return workflow_id


async def _poll(client: AsyncClient, size: int) -> s.PollForDecisionTaskResponse:
    resp: s.PollForDecisionTaskResponse = await client.rpc(
        "PollForDecisionTask",
        s.PollForDecisionTaskRequest(
            namespace=client.namespace, task_list=task_list(size), identity="bench-growth"
        ),
        timeout=timedelta(seconds=30),
    )
    return resp


async def _decision_task(
    client: AsyncClient, decider: Decider, workflow_id: str, size: int
) -> dict[str, float]:
    t0 = time.perf_counter()
    resp = await _poll(client, size)
    t1 = time.perf_counter()
    if resp.workflow_execution.workflow_id != workflow_id:
        raise RuntimeError(f"polled {resp.workflow_execution.workflow_id!r}, not {workflow_id!r}")
    raw = list(resp.events)
    token = resp.next_page_token
    while token:
        page = await client.rpc(
            "GetWorkflowHistory",
            s.GetWorkflowHistoryRequest(
                namespace=client.namespace,
                execution=resp.workflow_execution,
                next_page_token=token,
            ),
        )
        raw.extend(page.events)
        token = page.next_page_token
    t2 = time.perf_counter()
    task = DecisionTask(
        workflow_id=resp.workflow_execution.workflow_id,
        run_id=resp.workflow_execution.run_id,
        workflow_type=resp.workflow_type.name,
        version=resp.workflow_type.version,
        history=[event_from_proto(e, client.converter) for e in raw],
        started_event_id=resp.started_event_id,
        previous_started_event_id=resp.previous_started_event_id,
        continue_as_new_suggested=resp.continue_as_new_suggested,
    )
    decider.decide(task)
    t3 = time.perf_counter()
    await client.rpc(
        "RespondDecisionTaskCompleted",
        s.RespondDecisionTaskCompletedRequest(
            task_token=resp.task_token, decisions=[], identity="bench-growth"
        ),
    )
    t4 = time.perf_counter()
    server = (t1 - t0) + (t2 - t1) + (t4 - t3)
    return {
        "events": float(len(raw)),
        "poll_ms": (t1 - t0) * 1000,
        "pages_ms": (t2 - t1) * 1000,
        "decider_ms": (t3 - t2) * 1000,
        "respond_ms": (t4 - t3) * 1000,
        "server_ms": server * 1000,
        "total_ms": (t4 - t0) * 1000,
    }


async def run(rig: Rig, log: Any) -> dict[str, Any]:
    """The sizes take turns within each repeat, so the ratio of the largest to
    the smallest compares tasks decided a moment apart."""
    client = rig.pg.client
    decider = Growth()
    sizes = rig.profile.history_sizes
    shared: dict[int, str] = {}
    for size in sizes:
        if size >= FRESH_RUN_BELOW:
            log(f"history growth: building a run of {size} events")
            shared[size] = await _grow(client, size)
    series: dict[int, dict[str, list[float]]] = {size: defaultdict(list) for size in sizes}
    ratios: dict[str, list[float]] = defaultdict(list)
    # Repeat 0 is untimed: it warms the caches and, on a shared run, consumes
    # the task that carried the initial history.
    for repeat in range(rig.profile.growth_repeats + 1):
        if repeat:
            log(f"history growth: repeat {repeat}")
        samples: dict[int, dict[str, float]] = {}
        for size in sizes:
            workflow_id = shared.get(size) or await _grow(client, size)
            if size in shared and repeat > 0:
                await client.signal(workflow_id, "grow", -repeat)
            samples[size] = await _decision_task(client, decider, workflow_id, size)
            if size not in shared:
                await client.terminate(workflow_id, reason="bench: measured")
        if repeat == 0:
            continue
        for size, sample in samples.items():
            for key, value in sample.items():
                series[size][key].append(value)
        small, large = samples[sizes[0]], samples[sizes[-1]]
        for part in ("total_ms", "server_ms", "decider_ms"):
            ratios[part].append(ratio(large[part], small[part]))
    for workflow_id in shared.values():
        await client.terminate(workflow_id, reason="bench: measured")
    return {
        "sizes": [
            {"history_events": size, **{k: spread(v) for k, v in series[size].items()}}
            for size in sizes
        ],
        "ratio_largest_over_smallest": {part: spread(v) for part, v in ratios.items()},
    }

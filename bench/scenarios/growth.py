"""Scenario 4, history growth: what one decision task costs when the run's
history holds 10, 1,000 or 10,000 events.

The driver is the decider here (an instrumented copy of the SDK worker's
steps), so each part is timed on its own: the poll that hands out the task,
the history pages after the first, the decider (events decoded, the task
folded, `decide`), and the answer. The histories are grown with markers and signals
while no decider polls; each repeat then adds one signal (4 events). Each size is
measured twice: `sticky`, with the SDK's cache of runs (a task brings only the
events since the previous one), and `full`, without it (every task brings and
folds the whole history, as for a decider that does not hold the run)."""

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
from sdk.decider_cache import CachedRun, RunCache
from sdk.events import event_from_proto
from sdk.history import Fold

# Polled by this scenario only, never by `weft decider`; one list per history
# size, since a poll cannot ask for a particular run.
TASK_LIST = "bench-growth"
SIGNAL_CONCURRENCY = 16
MARKERS_PER_TASK = 500
MIN_MARKERS = 8


class Growth(Decider):
    """Reads the whole history, as every decider does, and decides nothing."""

    workflow_type = "bench-growth"
    task_list = TASK_LIST

    def decide(self, task: DecisionTask) -> None:
        _ = (task.activities, task.timers, task.signals(), task.input)


def task_list(size: int, mode: str) -> str:
    return f"{TASK_LIST}-{mode}-{size}"


async def _grow(client: AsyncClient, events: int, tasks: str) -> str:
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
        task_list=tasks,
        execution_timeout=timedelta(hours=1),
        decider_timeout=timedelta(minutes=5),
    )
    # So far: WorkflowStarted, DeciderScheduled. The poll that takes the pending
    # task adds DeciderStarted, so `have + 1` is what that task would carry.
    have = 2
    # A round adds DeciderStarted, the markers, DeciderCompleted, Signal, DeciderScheduled.
    while events - (have + 1) >= 4 + MIN_MARKERS:
        markers = min(MARKERS_PER_TASK, events - (have + 1) - 4)
        resp = await _poll(client, tasks)
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


async def _poll(
    client: AsyncClient, tasks: str, cache_id: str = ""
) -> s.PollForDecisionTaskResponse:
    resp: s.PollForDecisionTaskResponse = await client.rpc(
        "PollForDecisionTask",
        s.PollForDecisionTaskRequest(
            namespace=client.namespace,
            task_list=tasks,
            identity="bench-growth",
            cache_id=cache_id,
        ),
        timeout=timedelta(seconds=30),
    )
    return resp


async def _decision_task(
    client: AsyncClient, decider: Decider, workflow_id: str, tasks: str, cache: RunCache | None
) -> dict[str, float]:
    """One decision task, as the SDK's DeciderWorker takes it: with a cache, a
    run it holds comes with only its new events, which are decoded and folded
    onto what it has; without one (or on a miss), the whole history is."""
    t0 = time.perf_counter()
    resp = await _poll(client, tasks, cache.id if cache is not None else "")
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
    run_id = resp.workflow_execution.run_id
    held = cache.take(run_id, resp.previous_started_event_id) if cache is not None else None
    new = [event_from_proto(e, client.converter, strict=True) for e in raw]
    if resp.first_event_id > 1:
        if held is None:
            raise RuntimeError("the server sent new events only, and the cache misses the run")
        held.history.extend(new)
        held.fold.add(new)
        held.started_event_id = resp.started_event_id
    else:
        held = CachedRun(new, resp.started_event_id, Fold().add(new))
    task = DecisionTask(
        workflow_id=resp.workflow_execution.workflow_id,
        run_id=run_id,
        workflow_type=resp.workflow_type.name,
        version=resp.workflow_type.version,
        history=held.history,
        started_event_id=resp.started_event_id,
        previous_started_event_id=resp.previous_started_event_id,
        continue_as_new_suggested=resp.continue_as_new_suggested,
        view=held.fold.view,
    )
    decider.decide(task)
    t3 = time.perf_counter()
    await client.rpc(
        "RespondDecisionTaskCompleted",
        s.RespondDecisionTaskCompletedRequest(
            task_token=resp.task_token,
            decisions=[],
            identity="bench-growth",
            cache_id=cache.id if cache is not None else "",
        ),
    )
    t4 = time.perf_counter()
    if cache is not None:
        cache.keep(run_id, held)
    server = (t1 - t0) + (t2 - t1) + (t4 - t3)
    return {
        "events": float(len(held.history)),
        "events_sent": float(len(raw)),
        "poll_ms": (t1 - t0) * 1000,
        "pages_ms": (t2 - t1) * 1000,
        "decider_ms": (t3 - t2) * 1000,
        "respond_ms": (t4 - t3) * 1000,
        "server_ms": server * 1000,
        "total_ms": (t4 - t0) * 1000,
    }


MODES = ("sticky", "full")


async def run(rig: Rig, log: Any) -> dict[str, Any]:
    """Each size has a run per mode: `sticky`, decided with a cache (as the SDK's
    DeciderWorker does: the run's tasks after its first bring only new events),
    and `full`, decided without one (every task brings the whole history: what a
    decider that does not hold the run pays). Sizes and modes take turns within
    each repeat, so a ratio compares tasks decided a moment apart."""
    client = rig.pg.client
    decider = Growth()
    sizes = rig.profile.history_sizes
    caches: dict[str, RunCache | None] = {"sticky": RunCache(), "full": None}
    runs: dict[tuple[str, int], str] = {}
    for mode in MODES:
        for size in sizes:
            log(f"history growth: building a run of {size} events ({mode})")
            runs[(mode, size)] = await _grow(client, size, task_list(size, mode))
    series: dict[str, dict[int, dict[str, list[float]]]] = {
        mode: {size: defaultdict(list) for size in sizes} for mode in MODES
    }
    ratios: dict[str, dict[str, list[float]]] = {mode: defaultdict(list) for mode in MODES}
    # Repeat 0 is untimed: it consumes the task that carried the initial history,
    # which fills the cache of the sticky runs.
    for repeat in range(rig.profile.growth_repeats + 1):
        if repeat:
            log(f"history growth: repeat {repeat}")
        for mode in MODES:
            samples: dict[int, dict[str, float]] = {}
            for size in sizes:
                workflow_id = runs[(mode, size)]
                if repeat > 0:
                    await client.signal(workflow_id, "grow", -repeat)
                samples[size] = await _decision_task(
                    client, decider, workflow_id, task_list(size, mode), caches[mode]
                )
            if repeat == 0:
                continue
            for size, sample in samples.items():
                for key, value in sample.items():
                    series[mode][size][key].append(value)
            small, large = samples[sizes[0]], samples[sizes[-1]]
            for part in ("total_ms", "server_ms", "decider_ms"):
                ratios[mode][part].append(ratio(large[part], small[part]))
    for workflow_id in runs.values():
        await client.terminate(workflow_id, reason="bench: measured")
    return {
        mode: {
            "sizes": [
                {"history_events": size, **{k: spread(v) for k, v in series[mode][size].items()}}
                for size in sizes
            ],
            "ratio_largest_over_smallest": {part: spread(v) for part, v in ratios[mode].items()},
        }
        for mode in MODES
    }

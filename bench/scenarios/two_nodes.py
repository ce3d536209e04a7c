"""Scenario 7, more than one server process on one PostgreSQL database.

* `result()` through another node: a workflow is closed through the main node
  while a client of a second `weft server` on the same database waits on its
  `result()`; the figure is how long after the close event (the server's
  clock) that call returns (same machine, same clock).
* Two server processes: the throughput workload against `weft server
  --workers 2` (its own database, decider and runner), taking turns with the
  one-process node within each repeat, at the largest in-flight count.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import pgdb
from bench.processes import WeftServer
from bench.rig import Rig, WeftNode
from bench.scenarios.throughput import weft_batch
from bench.stats import ratio, spread
from bench.workload import TASK_LIST
from sdk import AsyncClient

SETTLE = 0.3  # the waiting result() is parked on the other node before the close
WORKERS_DB = "weft_bench_workers"


async def _result_after_close(rig: Rig, other: AsyncClient) -> float:
    """Milliseconds from a close committed on the main node to `result()`
    returning through the other one."""
    main = rig.pg.client
    workflow_id = f"bench-close-{uuid.uuid4().hex[:6]}"
    await main.start_workflow(
        "bench-dispatch",
        None,
        workflow_id=workflow_id,
        task_list=TASK_LIST,
        execution_timeout=timedelta(minutes=10),
    )
    waiting = asyncio.create_task(other.result(workflow_id, timeout=timedelta(minutes=1)))
    await asyncio.sleep(SETTLE)
    await main.signal(workflow_id, "stop")
    await waiting
    returned = datetime.now(UTC)
    history = await main.history(workflow_id)
    return (returned - history[-1].timestamp).total_seconds() * 1000


async def _result_point(rig: Rig, log: Any) -> dict[str, Any]:
    other = WeftServer("pg-second-node", rig.pg.db_url, rig.log_dir, rig.log_level)
    other.start()
    try:
        await other.wait_serving()
        async with AsyncClient(other.address, identity="bench-follower") as client:
            log(f"two nodes: result() through the other node, {rig.profile.dispatch_repeats} times")
            delays = [
                await _result_after_close(rig, client) for _ in range(rig.profile.dispatch_repeats)
            ]
        return spread(delays)
    finally:
        other.stop()


async def _workers_point(rig: Rig, admin_url: str, log: Any) -> dict[str, Any]:
    profile = rig.profile
    inflight = max(profile.inflight)
    pgdb.recreate(admin_url, WORKERS_DB)
    node = await WeftNode.start(
        "pg-workers", pgdb.url(admin_url, WORKERS_DB), rig.log_dir, rig.log_level, 2
    )
    try:
        log(f"two nodes: --workers 2, {inflight} in flight, warm-up")
        await weft_batch(
            rig, node, inflight=inflight, workflows=profile.warmup_workflows, timed=False
        )
        series: dict[str, list[float]] = defaultdict(list)
        for repeat in range(profile.repeats):
            log(f"two nodes: --workers 2, {inflight} in flight, repeat {repeat + 1}")
            one = await weft_batch(rig, rig.pg, inflight=inflight, workflows=profile.workflows)
            two = await weft_batch(rig, node, inflight=inflight, workflows=profile.workflows)
            for key in (
                "activities_per_s",
                "server_cpu_per_activity_ms",
                "server_cpu_cores",
                "transactions_per_activity",
            ):
                series[f"one_process.{key}"].append(one[key])
                series[f"two_processes.{key}"].append(two[key])
            series["ratio.two_over_one_activities_per_s"].append(
                ratio(two["activities_per_s"], one["activities_per_s"])
            )
        return {"inflight": inflight, **{k: spread(v) for k, v in series.items()}}
    finally:
        await node.stop()
        pgdb.drop(admin_url, WORKERS_DB)


async def run(rig: Rig, log: Any) -> dict[str, Any]:
    return {
        "result_after_close_ms": await _result_point(rig, log),
        "server_workers": await _workers_point(rig, rig.admin_url, log),
    }

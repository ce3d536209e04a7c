"""One timed batch of Weft workflows: rates, CPU per activity (from /proc) and
the hand-off latencies read back from a sample of the histories."""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Sequence
from typing import Any

from bench.drive import run_batch, sample_hand_offs
from bench.processes import Process
from bench.procstat import machine_busy_seconds
from bench.rig import Rig, WeftNode
from bench.workload import TASK_LIST


async def weft_batch(
    rig: Rig,
    node: WeftNode,
    *,
    inflight: int,
    workflows: int,
    workflow_type: str = "bench-chain",
    task_list: str = TASK_LIST,
    workers: Sequence[Process] = (),
    timed: bool = True,
) -> dict[str, Any]:
    """Run one batch; with `timed=False` (warm-up) only run it. `workers` are
    the decider and runner processes doing the work (default: the node's; none
    when they run inside its server)."""
    steps = rig.profile.steps
    workers = workers or node.workers

    def workers_cpu() -> float:
        return sum(proc.cpu() for proc in workers)

    prefix = f"{workflow_type}-c{inflight}-{uuid.uuid4().hex[:6]}"
    counts0 = node.server.counts()
    server_cpu0, workers_cpu0 = node.server.cpu(), workers_cpu()
    # (PostgreSQL's sampled outside the machine's window: each sample is a query)
    probe = node.pg_probe if timed else None
    pg0 = probe.sample() if probe is not None else None
    machine_cpu0 = machine_busy_seconds()
    batch = await run_batch(
        node.client,
        rig.completions,
        workflow_type=workflow_type,
        task_list=task_list,
        workflows=workflows,
        steps=steps,
        inflight=inflight,
        prefix=prefix,
    )
    machine_cpu = machine_busy_seconds() - machine_cpu0
    server_cpu = node.server.cpu() - server_cpu0
    spent_by_workers = workers_cpu() - workers_cpu0
    pg1 = probe.sample() if probe is not None and pg0 is not None else None
    # Parked polls count when they answer: a few straddle the window's ends.
    counts = node.server.counts() - counts0
    node.check_alive()
    if not timed:
        return {}
    hand_offs, decisions = await sample_hand_offs(node.client, batch.workflow_ids)
    activities = workflows * steps
    return {
        "activities_per_s": activities / batch.seconds,
        "workflows_per_s": workflows / batch.seconds,
        "decision_tasks_per_s": workflows * statistics.mean(decisions) / batch.seconds,
        "decision_tasks_per_workflow": statistics.mean(decisions),
        "server_cpu_per_activity_ms": server_cpu / activities * 1000,
        "workers_cpu_per_activity_ms": spent_by_workers / activities * 1000,
        # Every process on the machine: server, workers, PostgreSQL, the driver.
        "machine_cpu_per_activity_ms": machine_cpu / activities * 1000,
        "machine_cores": machine_cpu / batch.seconds,
        # Of which PostgreSQL's (this database's backends, the cluster's own processes).
        **(
            {"pg_cpu_per_activity_ms": pg1.since(pg0) / activities * 1000}
            if pg0 is not None and pg1 is not None
            else {}
        ),
        "server_cpu_cores": server_cpu / batch.seconds,
        "rpcs_per_activity": sum(counts.rpcs.values()) / activities,
        "statements_per_activity": counts.statements / activities,
        "transactions_per_activity": counts.transactions / activities,
        **hand_offs.summary(),
    }

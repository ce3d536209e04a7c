"""Scenario 9, one process: the throughput workload against a node started with
`weft server --embed bench.workload` (its decider and runner inside the server,
calling it without gRPC) on a PostgreSQL database of its own, taking turns with
the DBOS peer within each repeat, at each in-flight level of scenario 1.

The deployment DBOS itself has (the workflow code and the engine in one
process), so its ratio to DBOS compares like with like; scenario 1 measures
the three-process deployment.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from bench import pgdb
from bench.rig import Rig, WeftNode
from bench.scenarios.throughput import weft_batch
from bench.stats import ratio, spread

EMBEDDED_DB = "weft_bench_embedded"


async def run(rig: Rig, log: Any) -> dict[str, Any]:
    profile = rig.profile
    pgdb.recreate(rig.admin_url, EMBEDDED_DB)
    db_url = pgdb.url(rig.admin_url, EMBEDDED_DB)
    node = await WeftNode.start("pg-embedded", db_url, rig.log_dir, rig.log_level, embed=True)
    try:
        points = []
        for inflight in profile.inflight:
            log(f"one process: {inflight} in flight, warm-up")
            await weft_batch(
                rig, node, inflight=inflight, workflows=profile.warmup_workflows, timed=False
            )
            series: dict[str, list[float]] = defaultdict(list)
            for repeat in range(profile.repeats):
                log(f"one process: {inflight} in flight, repeat {repeat + 1}")
                weft = await weft_batch(rig, node, inflight=inflight, workflows=profile.workflows)
                dbos = await rig.peer.run(profile.workflows, profile.steps, inflight)
                steps_per_s = dbos["steps"] / dbos["seconds"]
                dbos_machine_ms = dbos["machine_cpu_s"] / dbos["steps"] * 1000
                for key in (
                    "activities_per_s",
                    "server_cpu_per_activity_ms",
                    "server_cpu_cores",
                    "machine_cpu_per_activity_ms",
                    "rpcs_per_activity",
                    "transactions_per_activity",
                ):
                    series[f"weft.{key}"].append(weft[key])
                series["dbos.steps_per_s"].append(steps_per_s)
                series["dbos.machine_cpu_per_step_ms"].append(dbos_machine_ms)
                series["ratio.weft_activities_over_dbos_steps"].append(
                    ratio(weft["activities_per_s"], steps_per_s)
                )
                series["ratio.weft_machine_cpu_per_activity_over_dbos_step"].append(
                    ratio(weft["machine_cpu_per_activity_ms"], dbos_machine_ms)
                )
            points.append({"inflight": inflight, **{k: spread(v) for k, v in series.items()}})
        return {"points": points}
    finally:
        await node.stop()
        pgdb.drop(rig.admin_url, EMBEDDED_DB)

"""The throughput workload once on SQLite (the embedded default): a second
`weft server` on a fresh database file, with its own decider and runner,
taking turns with the PostgreSQL node within each repeat."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from bench.rig import Rig, WeftNode
from bench.scenarios.throughput import weft_batch
from bench.stats import ratio, spread


async def run(rig: Rig, log: Any) -> dict[str, Any]:
    profile = rig.profile
    path = rig.log_dir / "weft-bench.sqlite"
    for leftover in rig.log_dir.glob("weft-bench.sqlite*"):
        leftover.unlink()
    node = await WeftNode.start("sqlite", f"sqlite:///{path}", rig.log_dir, rig.log_level)
    try:
        points = []
        for inflight in profile.sqlite_inflight:
            log(f"sqlite: {inflight} in flight, warm-up")
            await weft_batch(
                rig, node, inflight=inflight, workflows=profile.warmup_workflows, timed=False
            )
            series: dict[str, list[float]] = defaultdict(list)
            for repeat in range(profile.repeats):
                log(f"sqlite: {inflight} in flight, repeat {repeat + 1}")
                pg = await weft_batch(rig, rig.pg, inflight=inflight, workflows=profile.workflows)
                lite = await weft_batch(rig, node, inflight=inflight, workflows=profile.workflows)
                for key, value in lite.items():
                    series[f"sqlite.{key}"].append(value)
                for key in ("activities_per_s", "server_cpu_per_activity_ms"):
                    series[f"postgres.{key}"].append(pg[key])
                series["ratio.sqlite_over_postgres_activities_per_s"].append(
                    ratio(lite["activities_per_s"], pg["activities_per_s"])
                )
            points.append({"inflight": inflight, **{k: spread(v) for k, v in series.items()}})
        return {"points": points}
    finally:
        await node.stop()
        for leftover in rig.log_dir.glob("weft-bench.sqlite*"):
            leftover.unlink()

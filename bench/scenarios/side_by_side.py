"""Scenarios 1-3, taking turns within each repeat so that every ratio compares
figures measured seconds apart on the same noisy machine:

1. throughput — Weft, N workflows of K trivial activities, at each in-flight level;
2. the peer — DBOS Transact, N workflows of K trivial steps, same level, same PostgreSQL;
3. the limits — a bare psycopg append transaction and a bare grpc.aio echo,
   with as many concurrent writers / callers as workflows in flight, and the
   floor of Weft's stack (`bench.floor`: the same RPCs and commits with none
   of Weft's code), with as many runs moving at once.

Each repeat yields its own ratios; the report gives their medians and ranges.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from bench import append, echo, floor
from bench.rig import Rig
from bench.scenarios.throughput import weft_batch
from bench.stats import ratio, spread


async def run(rig: Rig, log: Any) -> dict[str, Any]:
    profile = rig.profile
    points = []
    for inflight in profile.inflight:
        log(f"throughput/peer/limits: {inflight} in flight, warm-up")
        await weft_batch(
            rig, rig.pg, inflight=inflight, workflows=profile.warmup_workflows, timed=False
        )
        await rig.peer.run(profile.warmup_workflows, profile.steps, inflight)
        series: dict[str, list[float]] = defaultdict(list)
        for repeat in range(profile.repeats):
            log(f"throughput/peer/limits: {inflight} in flight, repeat {repeat + 1}")
            weft = await weft_batch(rig, rig.pg, inflight=inflight, workflows=profile.workflows)
            dbos = await rig.peer.run(profile.workflows, profile.steps, inflight)
            bare_append = await append.load(
                rig.append_url, inflight, profile.limit_seconds, profile.limit_warmup
            )
            bare_echo = await echo.load(
                rig.echo_address,
                inflight,
                profile.limit_seconds,
                profile.limit_warmup,
                rig.echo.cpu,
            )
            floor_figures = await floor.figures(
                rig.floor_address,
                f"{inflight}-{repeat}",
                inflight,
                profile.limit_seconds,
                profile.limit_warmup,
                rig.floor.cpu,
                weft,
                bare_echo.server_cpu_per_call_ms,
            )
            dbos_steps_per_s = dbos["steps"] / dbos["seconds"]
            for key, value in weft.items():
                series[f"weft.{key}"].append(value)
            series["dbos.steps_per_s"].append(dbos_steps_per_s)
            series["dbos.workflows_per_s"].append(dbos["workflows"] / dbos["seconds"])
            series["dbos.cpu_per_step_ms"].append(dbos["cpu_s"] / dbos["steps"] * 1000)
            dbos_machine_ms = dbos["machine_cpu_s"] / dbos["steps"] * 1000
            series["dbos.machine_cpu_per_step_ms"].append(dbos_machine_ms)
            series["dbos.machine_cores"].append(dbos["machine_cpu_s"] / dbos["seconds"])
            series["ratio.weft_machine_cpu_per_activity_over_dbos_step"].append(
                ratio(weft["machine_cpu_per_activity_ms"], dbos_machine_ms)
            )
            series["dbos.step_p50_ms"].append(dbos["step_p50_ms"])
            series["dbos.step_p99_ms"].append(dbos["step_p99_ms"])
            series["append.txns_per_s"].append(bare_append.rate)
            series["append.p50_ms"].append(bare_append.p50_ms)
            series["echo.calls_per_s"].append(bare_echo.rate)
            series["echo.p50_ms"].append(bare_echo.p50_ms)
            series["echo.server_cpu_per_call_ms"].append(bare_echo.server_cpu_per_call_ms)
            series["echo.client_cpu_per_call_ms"].append(bare_echo.client_cpu_per_call_ms)
            for key, value in floor_figures.items():
                series[key].append(value)
            acts = weft["activities_per_s"]
            series["ratio.weft_activities_over_dbos_steps"].append(ratio(acts, dbos_steps_per_s))
            series["ratio.append_txns_per_activity"].append(ratio(bare_append.rate, acts))
            series["ratio.echo_calls_per_activity"].append(ratio(bare_echo.rate, acts))
            series["ratio.server_cpu_per_activity_in_echo_calls"].append(
                ratio(weft["server_cpu_per_activity_ms"], bare_echo.server_cpu_per_call_ms)
            )
        points.append({"inflight": inflight, **{k: spread(v) for k, v in series.items()}})
    return {
        "workflows_per_batch": profile.workflows,
        "steps_per_workflow": profile.steps,
        "repeats": profile.repeats,
        "points": points,
    }

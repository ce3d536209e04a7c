"""Scenario 6, steps: the throughput workload as a step workflow (K
`activity noop` steps in the YAML step language), decided by the step
interpreter of a `weft decider --definitions DIR` process, against the same
workload decided by SDK code — in turns within each repeat.

If this checkout's `weft decider` does not run the definitions (the step
interpreter being unfinished), the scenario reports `skipped: <reason>`."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.processes import Process, weft_worker
from bench.rig import DECIDER_CONCURRENCY, Rig
from bench.scenarios.throughput import weft_batch
from bench.stats import ratio, spread
from bench.workload import TASK_LIST

WORKFLOW_TYPE = "bench-steps"
STEPS_TASK_LIST = "bench-steps"
STARTUP = 2.0  # a decider that refuses its definitions exits well within this


def definition(steps: int) -> str:
    """K `activity noop` steps; the last one reports the run as done (bench.workload)."""
    lines = [
        f"name: {WORKFLOW_TYPE}",
        'version: "1"',
        f"task_list: {STEPS_TASK_LIST}",
        "description: K trivial activities, the step-language twin of bench-chain",
        "steps:",
    ]
    for i in range(steps):
        extra = ""
        if i == steps - 1:
            extra = ', notify: "${workflow.input.notify}", key: "${workflow.input.key}"'
        lines += [
            "  - step: activity noop",
            f"    task_list: {TASK_LIST}",
            f"    input: {{i: {i}{extra}}}",
        ]
    return "\n".join(lines) + "\n"


async def _start_decider(rig: Rig, folder: Path) -> Process | str:
    """The step decider, or why it cannot run."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{WORKFLOW_TYPE}.yaml").write_text(definition(rig.profile.steps))
    decider = weft_worker(
        "decider",
        "steps-decider",
        rig.pg.server.address,
        ["--concurrency", DECIDER_CONCURRENCY, "--definitions", str(folder)],
        rig.log_dir,
        rig.log_level,
    ).start()
    await asyncio.sleep(STARTUP)
    if not decider.running:
        lines = [line for line in decider.log_tail(5).splitlines()[1:] if line.strip()]
        return (
            lines[-1]
            if lines
            else f"weft decider exited ({decider.proc and decider.proc.returncode})"
        )
    return decider


async def run(rig: Rig, log: Any) -> dict[str, Any]:
    profile = rig.profile
    started = await _start_decider(rig, rig.log_dir / "definitions")
    if isinstance(started, str):
        return {"skipped": f"weft decider --definitions: {started}"}
    decider = started
    assert rig.pg.runner is not None  # (the rig's node runs its workers as processes)
    workers = (decider, rig.pg.runner)

    async def steps_batch(inflight: int, workflows: int, timed: bool = True) -> dict[str, Any]:
        return await weft_batch(
            rig,
            rig.pg,
            inflight=inflight,
            workflows=workflows,
            workflow_type=WORKFLOW_TYPE,
            task_list=STEPS_TASK_LIST,
            workers=workers,
            timed=timed,
        )

    try:
        points = []
        for inflight in profile.steps_inflight:
            log(f"steps: {inflight} in flight, warm-up")
            try:
                await steps_batch(inflight, profile.warmup_workflows, timed=False)
            except TimeoutError:
                return {"skipped": f"step workflows did not finish\n{decider.log_tail(5)}"}
            series: dict[str, list[float]] = defaultdict(list)
            for repeat in range(profile.repeats):
                log(f"steps: {inflight} in flight, repeat {repeat + 1}")
                code = await weft_batch(rig, rig.pg, inflight=inflight, workflows=profile.workflows)
                steps = await steps_batch(inflight, profile.workflows)
                for key, value in steps.items():
                    series[f"steps.{key}"].append(value)
                for key in ("activities_per_s", "server_cpu_per_activity_ms"):
                    series[f"code.{key}"].append(code[key])
                series["ratio.steps_over_code_activities_per_s"].append(
                    ratio(steps["activities_per_s"], code["activities_per_s"])
                )
                series["ratio.steps_over_code_server_cpu_per_activity"].append(
                    ratio(steps["server_cpu_per_activity_ms"], code["server_cpu_per_activity_ms"])
                )
                series["ratio.steps_over_code_workers_cpu_per_activity"].append(
                    ratio(steps["workers_cpu_per_activity_ms"], code["workers_cpu_per_activity_ms"])
                )
            points.append({"inflight": inflight, **{k: spread(v) for k, v in series.items()}})
        return {"points": points}
    finally:
        decider.stop()

"""A workflow for the worker-process tests, loaded by path into `weft decider`
and `weft runner`: one heartbeating activity whose first attempt is slow and
whose retries are quick, retried up to three attempts, then (if asked) a wait
for the signal `go`."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from sdk import Decider, DecisionTask, activity


@activity(name="slow-step", start_to_close=timedelta(minutes=2), heartbeat=timedelta(seconds=2))
def slow_step(job: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + float(job["seconds"])
    while time.monotonic() < deadline:
        activity.heartbeat({"left": round(deadline - time.monotonic(), 2)})
        time.sleep(0.05)
    return {"attempt": job["attempt"], "task_list": activity.info().task_list}


class SlowFlow(Decider):
    workflow_type = "slow-flow"

    def decide(self, task: DecisionTask) -> None:
        plan = task.input
        step = task.activities.get("step")
        if step is None or (step.status in ("failed", "timed_out") and step.attempts < 3):
            attempt = 1 if step is None else step.attempts + 1
            seconds = plan["first"] if attempt == 1 else plan["retry"]
            job = {"attempt": attempt, "seconds": seconds}
            task.schedule_activity("step", slow_step, job, task_list=plan["task_list"])
        elif step.status in ("failed", "timed_out"):
            task.fail("step failed three times")
        elif step.status == "succeeded" and (not plan.get("wait_for_go") or task.signals("go")):
            task.complete(step.result)

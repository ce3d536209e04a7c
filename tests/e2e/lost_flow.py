"""A workflow for the lost-worker tests, loaded by path into `weft decider` and
`weft runner`: eight activities at once whose first attempts block for ten
minutes (start-to-close ten minutes, no heartbeat timeout) and whose retries
return at once. A decider started with WEFT_TEST_BLOCK_DECIDER=1 hangs in its
first decision instead, as a decider stuck on a lost machine would."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from sdk import Decider, DecisionTask, activity

WIDTH = 8


@activity(name="lost-step", start_to_close=timedelta(minutes=10))
def lost_step(job: dict[str, Any]) -> dict[str, Any]:
    if job["attempt"] == 1:
        time.sleep(job["first_sleep"])
    return {"attempt": job["attempt"]}


class LostFlow(Decider):
    workflow_type = "lost-flow"

    def decide(self, task: DecisionTask) -> None:
        if os.environ.get("WEFT_TEST_BLOCK_DECIDER") == "1":
            time.sleep(600)
        plan = task.input
        results = {}
        for n in range(plan.get("width", WIDTH)):
            step = task.activities.get(f"step-{n}")
            if step is None or (step.status == "timed_out" and step.attempts < 3):
                attempt = 1 if step is None else step.attempts + 1
                job = {"attempt": attempt, "first_sleep": plan.get("first_sleep", 600)}
                task.schedule_activity(f"step-{n}", lost_step, job, task_list=plan["task_list"])
            elif step.status == "succeeded":
                results[f"step-{n}"] = step.result
            elif not step.is_open:
                task.fail(f"step-{n} ended {step.status}")
                return
        if len(results) == plan.get("width", WIDTH):
            task.complete(results)

"""A workflow for the lock-contention tests, loaded by path into `weft decider`
and `weft runner`: take a lock, run one activity inside it (its result says
when it ran, by the runner's clock), give the lock back, complete."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from sdk import Decider, DecisionTask, activity


@activity(name="critical-section", start_to_close=timedelta(minutes=2))
def critical_section(job: dict[str, Any]) -> dict[str, float]:
    """Hold the section for a while. With a gate file named, stay inside until it
    exists, so that a test can line every other run up behind this one."""
    started = time.time()
    gate = job.get("gate")
    if gate:
        while not Path(gate).exists():
            time.sleep(0.02)
    time.sleep(float(job.get("seconds", 0.05)))
    return {"start": started, "end": time.time()}


class LockedSection(Decider):
    workflow_type = "locked-section"

    def decide(self, task: DecisionTask) -> None:
        plan = task.input
        name = plan["lock"]
        lock = task.locks.get(name)
        section = task.activities.get("section")
        if lock is None:
            task.request_lock(name)
        elif lock.held and section is None:
            task.schedule_activity("section", critical_section, plan, task_list=plan["task_list"])
        elif section is not None and not section.is_open:
            task.release_lock(name)
            if section.status == "succeeded":
                task.complete(section.result)
            else:
                task.fail("section failed", section.failure)

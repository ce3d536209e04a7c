"""The workflow of the `weft server --embed` tests, loaded by path: it waits for
a `go` signal, runs the `stamp` activity on the signal's input (again, up to
three times, when an attempt fails or times out), and completes with what
`stamp` returned. An input with `hold` keeps the first attempt running that
many seconds (a task in flight when the process stops); with `sync`, the
activity is a sync function, run in the runner's threads."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from sdk import Decider, DecisionTask, activity

TASK_LIST = "embedded"
# An attempt started by a process killed with -9 times out (WORKER_LOST): the
# decider schedules another.
ATTEMPTS = 3


# Start-to-close 30 s: an attempt lost with its process without a session note
# (tests/e2e/test_embedded_workers.py) still times out within the test's wait.
@activity(name="stamp", task_list=TASK_LIST, start_to_close=timedelta(seconds=30))
async def stamp(item: dict[str, Any]) -> dict[str, Any]:
    if item["attempt"] == 0:
        await asyncio.sleep(float(item.get("hold", 0)))
    return {"stamped": item["value"]}


@activity(name="stamp-sync", task_list=TASK_LIST, start_to_close=timedelta(seconds=120))
def stamp_sync(item: dict[str, Any]) -> dict[str, Any]:
    if item["attempt"] == 0:
        time.sleep(float(item.get("hold", 0)))
    return {"stamped": item["value"]}


class StampOnSignal(Decider):
    workflow_type = "embedded-stamp"
    task_list = TASK_LIST
    blocking = False

    def decide(self, task: DecisionTask) -> None:
        go = task.signals("go")
        if not go:
            return
        item = dict(go[0].input)
        for attempt in range(ATTEMPTS):
            act = task.activities.get(f"stamp{attempt}")
            if act is None:
                fn = stamp_sync if item.get("sync") else stamp
                task.schedule_activity(f"stamp{attempt}", fn, {**item, "attempt": attempt})
                return
            if act.status == "succeeded":
                task.complete(act.result)
                return
            if act.status not in ("failed", "timed_out", "canceled"):
                return  # still running
        task.fail(f"stamp failed {ATTEMPTS} times")

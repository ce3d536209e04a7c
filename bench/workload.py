"""The workflows the benchmark runs, loaded by real `weft decider` and
`weft runner` processes (`weft decider bench.workload`).

`bench-chain` runs K trivial activities one after the other: the shape of the
throughput scenario, and of the DBOS peer's K-step workflow.

The driver must learn when a workflow is done without adding load to the
server under test (following each history would double the RPCs), so the
last activity of a run reports its key in a UDP datagram to the driver. The
step-workflow scenario does the same, so both count a workflow as done at the
same point: when its K-th activity has finished.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

from sdk import Decider, DecisionTask, activity

TASK_LIST = "bench"


def notify(address: str, key: str) -> None:
    host, _, port = address.rpartition(":")
    # A socket per datagram (one per workflow): one kept for the process was
    # never closed, and its interpreter said so at exit (a ResourceWarning).
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(key.encode(), (host, int(port)))


@activity(name="noop", task_list=TASK_LIST, start_to_close=timedelta(seconds=60))
async def noop(item: dict[str, Any]) -> dict[str, Any]:
    """A trivial activity: what is measured is the orchestration around it."""
    if item.get("notify"):
        notify(str(item["notify"]), str(item["key"]))
    return {"i": item.get("i")}


class Chain(Decider):
    """K sequential `noop` activities, then complete."""

    workflow_type = "bench-chain"
    task_list = TASK_LIST
    blocking = False  # a few dict lookups: no need for a thread

    def decide(self, task: DecisionTask) -> None:
        config = task.input
        steps = int(config["k"])
        for i in range(steps):
            act = task.activities.get(f"a{i}")
            if act is None:
                last = i == steps - 1
                item = {"i": i, "notify": config.get("notify") if last else None}
                item["key"] = config.get("key")
                task.schedule_activity(f"a{i}", noop, item)
                return
            if act.status in ("failed", "timed_out", "canceled"):
                task.fail(f"a{i} {act.status}")
                return
            if act.status != "succeeded":
                return
        task.complete({"steps": steps})


class Dispatch(Decider):
    """Idle until signalled: each `go` signal schedules one `noop`, `stop`
    completes. The dispatch scenario times the hand-offs between them."""

    workflow_type = "bench-dispatch"
    task_list = TASK_LIST
    blocking = False

    def decide(self, task: DecisionTask) -> None:
        if task.signals("stop"):
            task.complete(None)
            return
        for n in range(len(task.signals("go"))):
            if f"go{n}" not in task.activities:
                task.schedule_activity(f"go{n}", noop, {"i": n})

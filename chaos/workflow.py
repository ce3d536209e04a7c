"""The workflow the chaos run drives, loaded by real `weft decider chaos.workflow`
and `weft runner chaos.workflow` processes.

Each run of `chaos` does, from its input `{"n": N, "pause": SECONDS}`:

1. activities `a0` and `a1` in parallel, and the timer `pause`;
2. once both succeeded, the timer fired and the signal `go` arrived: `a2` on
   their results and the signal's value;
3. completes with `a2`'s result and how many `go` signals it saw.

Every value is a pure function of `n` and the signal's value (`expected`), so
the checker knows the right result of every run without trusting anything the
processes under test said. An activity that failed or timed out (its runner was
killed) is scheduled again; each attempt may fail on purpose (`FAIL_RATE`) so
the retry path is exercised even when no kill lands on it.
"""

from __future__ import annotations

import random
import time
from datetime import timedelta
from typing import Any

from sdk import Decider, DecisionTask, activity

WORKFLOW_TYPE = "chaos"
TASK_LIST = "chaos"
SIGNAL = "go"
TIMER = "pause"
PARALLEL = ("a0", "a1")
LAST = "a2"
ACTIVITIES = (*PARALLEL, LAST)
MODULUS = 1_000_003  # keeps every number exact in JSON (far below 2**53)
FAIL_RATE = 0.05
# Short, so an attempt whose runner was killed is retried within seconds.
START_TO_CLOSE = timedelta(seconds=5)


def step(x: int) -> int:
    """What the activity computes."""
    return (x * x + 7) % MODULUS


def signal_value(n: int) -> int:
    """The value the driver sends with run `n`'s `go` signal."""
    return (n * 7919) % 1000 + 1


def first_inputs(n: int) -> dict[str, int]:
    return {aid: 10 * n + i for i, aid in enumerate(PARALLEL)}


def expected(n: int) -> dict[str, int]:
    """The result run `n` must complete with."""
    firsts = first_inputs(n)
    last_input = sum(step(x) for x in firsts.values()) + signal_value(n)
    return {"n": n, "y": step(last_input), "signals": 1}


class ChaosError(Exception):
    """The injected failure of an attempt (retried by the decider)."""


@activity(name="chaos-step", task_list=TASK_LIST, start_to_close=START_TO_CLOSE)
def chaos_step(job: dict[str, Any]) -> int:
    # A little work time widens the window in which a kill lands mid-attempt.
    time.sleep(random.uniform(0.0, 0.2))
    if random.random() < FAIL_RATE:
        raise ChaosError("injected failure")
    return step(int(job["x"]))


class Chaos(Decider):
    workflow_type = WORKFLOW_TYPE
    task_list = TASK_LIST
    blocking = False  # a few dict lookups

    def decide(self, task: DecisionTask) -> None:
        n = int(task.input["n"])
        timer = task.timers.get(TIMER)
        if timer is None:
            task.start_timer(TIMER, timedelta(seconds=float(task.input["pause"])))
        elif timer.status not in ("started", "fired"):
            task.fail(f"timer {TIMER} {timer.status}")
            return
        results = {aid: self._run(task, aid, x) for aid, x in first_inputs(n).items()}
        signals = task.signals(SIGNAL)
        fired = timer is not None and timer.status == "fired"
        if None in results.values() or not signals or not fired:
            return
        last_input = sum(int(y) for y in results.values() if y is not None)
        last = self._run(task, LAST, last_input + int(signals[0].input["v"]))
        if last is not None:
            task.complete({"n": n, "y": int(last), "signals": len(signals)})

    def _run(self, task: DecisionTask, activity_id: str, x: int) -> Any:
        """The activity's result once it succeeded, else None (scheduling it the
        first time and again after a failure or timeout)."""
        act = task.activities.get(activity_id)
        if act is None or act.status in ("failed", "timed_out"):
            task.schedule_activity(activity_id, chaos_step, {"x": x})
            return None
        return act.result if act.status == "succeeded" else None

"""A tiny workflow for the CLI tests, loaded by path into `weft decider`.

Its input says what to do: `{"fail": REASON}` fails the run, `{"wait_for": NAME}`
completes it with the first signal NAME's input, anything else completes it at
once with `{"echo": INPUT}`. A cancel request cancels it.
"""

from __future__ import annotations

from sdk import Decider, DecisionTask

WORKFLOW_TYPE = "cli-flow"


class CliFlow(Decider):
    workflow_type = WORKFLOW_TYPE

    def decide(self, task: DecisionTask) -> None:
        plan = task.input if isinstance(task.input, dict) else {}
        if task.cancel_requested:
            task.cancel({"reason": "canceled on request"})
        elif plan.get("fail"):
            task.fail(str(plan["fail"]), {"asked": True})
        elif plan.get("wait_for"):
            got = task.signals(str(plan["wait_for"]))
            if got:
                task.complete({"signal": got[0].input})
        else:
            task.complete({"echo": task.input})

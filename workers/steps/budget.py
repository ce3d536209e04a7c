"""The CPU budget of one decision task (`limits.DECIDE_CPU_SECONDS`).

A decider process is shared by every run on its task lists; one run whose
history takes too long to replay, or whose steps compute too long, must not
hold it. The budget is the CPU time of the deciding thread (not wall-clock
time, which other threads and processes would eat into), checked before each
event delivered and each step started; past it, the run fails with
`DecisionBudgetExceeded` and its cause, which an operator can read.
"""

from __future__ import annotations

import time

from workers.steps.errors import StepInterpreterError


class BudgetExceeded(StepInterpreterError):
    """One decision task used more CPU time than its budget. Not a StepError:
    no `on-error` may catch it and keep the loop going."""


class Budget:
    """CPU seconds one decision task may use, counted from its creation."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.thread_time()
        self.exceeded = False

    def check(self) -> None:
        """Raise `BudgetExceeded` once the budget is spent (and from then on)."""
        if not self.exceeded and time.thread_time() - self.started <= self.seconds:
            return
        self.exceeded = True
        raise BudgetExceeded(
            f"deciding this task took more than {self.seconds:g} s of CPU time"
            " (replaying the history and running the steps): the steps loop without"
            " waiting long enough, or the history is too long (continue as new)"
        )

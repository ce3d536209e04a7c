"""Retrying calls the server could not take: `UNAVAILABLE` (it is restarting, its
database is down, or it is draining), `ABORTED` (the call lost a race and wrote
nothing) and `RESOURCE_EXHAUSTED` for the caller's request rate (refused before
anything was done; sent again after the wait the server asks for). Starts,
signals and cancels carry a request id the server deduplicates on, and task
answers name their task with a token that goes stale once answered, so a retry
after a lost answer does the work once. The exception is `terminate`: retried
after a commit whose answer was lost, it finds the run closed and reports
FAILED_PRECONDITION."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter. `give_up_after=None` retries forever."""

    initial: timedelta = timedelta(milliseconds=100)
    maximum: timedelta = timedelta(seconds=5)
    multiplier: float = 2.0
    give_up_after: timedelta | None = timedelta(minutes=1)

    def delays(self) -> Delays:
        return Delays(self)


class Delays:
    """The waits between attempts of one call: 0.1 s, 0.2 s, 0.4 s … up to `maximum`,
    each shortened by up to a fifth at random so restarted workers do not return
    in lockstep."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._next = min(policy.initial, policy.maximum).total_seconds()
        self.elapsed = 0.0

    def next(self) -> float | None:
        """Seconds to wait before the next attempt, or None to give up."""
        limit = self._policy.give_up_after
        if limit is not None and self.elapsed >= limit.total_seconds():
            return None
        wait = self._next * (1 - random.random() / 5)
        if limit is not None:
            wait = min(wait, max(limit.total_seconds() - self.elapsed, 0.0))
        self._next = min(self._next * self._policy.multiplier, self._policy.maximum.total_seconds())
        self.elapsed += wait
        return wait

    def pushback(self, asked: float) -> float | None:
        """Seconds to wait when the server asked for `asked` (its request rate):
        that, lengthened by up to a fifth at random so that callers refused
        together do not come back together; None when the policy's time would
        run out first. The backoff does not grow: the server said when."""
        wait = asked * (1 + random.random() / 5)
        limit = self._policy.give_up_after
        if limit is not None and self.elapsed + wait > limit.total_seconds():
            return None
        self.elapsed += wait
        return wait


DEFAULT_RETRY = RetryPolicy()

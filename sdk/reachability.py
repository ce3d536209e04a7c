"""Whether a client's server is within reach, as its calls find it. A worker
waits for a server out of reach without end, each retry a debug line; this says
an outage once, at info (a worker's level; a CLI command's, warning, keeps its
one line), when it has lasted `SAY_AWAY_AFTER` (a restart's blip is not said),
and its end. A client and its forks (a worker's poll connections) share one."""

from __future__ import annotations

import time

import structlog

log = structlog.get_logger("weft.client")

SAY_AWAY_AFTER = 2.0


class Reachability:
    def __init__(self, address: str) -> None:
        self.address = address
        self.away_since: float | None = None
        """Since when calls have found the server out of reach (monotonic)."""
        self._said = False

    def away(self, error: str) -> None:
        """A call found the server out of reach and will try again."""
        now = time.monotonic()
        if self.away_since is None:
            self.away_since = now
        elif not self._said and now - self.away_since >= SAY_AWAY_AFTER:
            self._said = True
            log.info("server.unreachable", address=self.address, error=error[:200], retrying=True)

    def back(self) -> None:
        """A call went through."""
        if self._said and self.away_since is not None:
            away = time.monotonic() - self.away_since
            log.info("server.reachable", address=self.address, after_s=round(away, 1))
        self.away_since, self._said = None, False

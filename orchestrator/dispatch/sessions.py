"""What this node knows of worker sessions between database writes.

A poll that starts a task under a session notes (session, run) here; the pairs
are written in one batch every `FLUSH_EVERY` seconds (`worker_runs`), never by
the poll: the reaper needs them only once the session has been silent for its
whole timeout, which is longer. Sessions known to have ended (here or, through
NOTIFY, on another node) are refused at the poll, so a worker that missed its
own expiry learns it at once and registers again.
"""

from __future__ import annotations

from collections import OrderedDict

from orchestrator.engine.errors import FailedPrecondition

FLUSH_EVERY = 1.0
MAX_ENDED = 10_000
MAX_UNWRITTEN = 100_000


class SessionBook:
    def __init__(self) -> None:
        self._unwritten: set[tuple[str, str]] = set()
        self._ended: OrderedDict[str, None] = OrderedDict()

    def started(self, session_id: str, run_id: str) -> None:
        """A task of `run_id` was started under `session_id`."""
        if session_id and len(self._unwritten) < MAX_UNWRITTEN:
            self._unwritten.add((session_id, run_id))

    def take_unwritten(self) -> list[tuple[str, str]]:
        out = sorted(self._unwritten)
        self._unwritten.clear()
        return out

    def put_back(self, pairs: list[tuple[str, str]]) -> None:
        """A write failed (the database is away): try these again next time."""
        for pair in pairs:
            self.started(*pair)

    def ended(self, session_id: str) -> None:
        self._ended[session_id] = None
        self._ended.move_to_end(session_id)
        while len(self._ended) > MAX_ENDED:
            self._ended.popitem(last=False)

    def check(self, session_id: str) -> None:
        """FAILED_PRECONDITION for a poll under a session known to have ended."""
        if session_id and session_id in self._ended:
            raise FailedPrecondition(
                f"worker session {session_id!r} has expired or was unregistered: register again"
            )

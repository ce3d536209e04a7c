"""A finding of `weft doctor`: one stuck thing, the runs it holds up, and what
to do. Kinds are named as in the wire enum without its `FINDING_KIND_` prefix."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.diagnostics.facts import ListRef
from orchestrator.engine.state import RunKey

NO_POLLER = "NO_POLLER"
DEADLINE_OVERDUE = "DEADLINE_OVERDUE"
LOCK_HOLDER_BLOCKED = "LOCK_HOLDER_BLOCKED"
LOCK_DEADLOCK = "LOCK_DEADLOCK"
HISTORY_NEAR_LIMIT = "HISTORY_NEAR_LIMIT"
SCHEDULE_MISSED_SLOTS = "SCHEDULE_MISSED_SLOTS"
# The order findings are reported in: what blocks most first.
KINDS = (
    LOCK_DEADLOCK,
    LOCK_HOLDER_BLOCKED,
    NO_POLLER,
    DEADLINE_OVERDUE,
    HISTORY_NEAR_LIMIT,
    SCHEDULE_MISSED_SLOTS,
)


@dataclass(frozen=True)
class Finding:
    kind: str
    namespace: str
    runs: tuple[RunKey, ...]
    """The runs involved, the stuck ones first (at most `rules.SAMPLE_RUNS`)."""
    count: int
    """What the finding counts (tasks, deadlines, waiters, cycle runs, events)."""
    explanation: str
    action: str
    since: datetime | None = None
    task_list: ListRef | None = None
    lock_name: str = ""
    chain: tuple[tuple[str, RunKey], ...] = ()
    """(lock, its holder) from the waiters' lock to the run that blocks it."""
    schedule: str = ""

    def involves(self, run_id: str) -> bool:
        return any(r.run_id == run_id for r in self.runs) or any(
            holder.run_id == run_id for _, holder in self.chain
        )

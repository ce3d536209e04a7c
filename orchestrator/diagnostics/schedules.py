"""SCHEDULE_MISSED_SLOTS: schedules whose slots are not being started.

A schedule not paused whose next slot was due (with its jitter) longer ago
than a deadline may be overdue is stuck: no node leads the upkeep, the leader
cannot start runs (a database error, a start refused), or the runner is
behind. The slots the runner later judges outside the catch-up window are
counted as missed on the schedule; the finding says how many it has counted.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from orchestrator.diagnostics.facts import Facts
from orchestrator.diagnostics.findings import SCHEDULE_MISSED_SLOTS, Finding
from orchestrator.schedules.runner import cursor_of, spec_of, start_time
from orchestrator.schedules.spec import SpecError
from orchestrator.store.schedules import ScheduleRow

MAX_LATE_SLOTS = 1000
"""Late slots counted per schedule (more are reported as this many)."""


def schedule_findings(facts: Facts) -> list[Finding]:
    """Schedules of `facts.namespace` with a slot overdue to start."""
    found = []
    cutoff = facts.now - timedelta(seconds=facts.overdue_after)
    for row in facts.schedules:
        late = _late_slots(row, facts)
        if not late or start_time(row, late[0]) > cutoff:
            continue
        missed = f"; {row.missed} slot(s) missed so far" if row.missed else ""
        found.append(
            Finding(
                kind=SCHEDULE_MISSED_SLOTS,
                namespace=facts.namespace,
                runs=(),
                count=len(late),
                since=late[0],
                schedule=row.name,
                explanation=(
                    f"schedule {row.name!r} has {len(late)} slot(s) due since"
                    f" {late[0].isoformat()} that no run was started for{missed}"
                ),
                action=(
                    "check `weft nodes` for a leader (the upkeep leader starts the slots) and"
                    " its log for schedule.start_refused; slots older than the catch-up window"
                    " are skipped: start them with `weft schedule backfill`"
                ),
            )
        )
    return found


def _late_slots(row: ScheduleRow, facts: Facts) -> list[datetime]:
    try:
        spec = spec_of(row)
    except SpecError:
        return []
    cursor = cursor_of(row)
    until = facts.now if row.end_at is None else min(facts.now, row.end_at)
    return spec.fire_times(cursor, until, MAX_LATE_SLOTS)

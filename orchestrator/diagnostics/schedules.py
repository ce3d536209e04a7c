"""SCHEDULE_MISSED_SLOTS: schedules that missed slots.

MERGE POINT: schedules are built in another branch (issue 18, item 3). When
they land, read each schedule's missed and skipped slot counts here and turn
them into findings of kind `MISSED_SLOTS` (see `findings.Finding`). Until then
there are no schedules, so there is nothing to find.
"""

from __future__ import annotations

from orchestrator.diagnostics.facts import Facts
from orchestrator.diagnostics.findings import Finding


def schedule_findings(facts: Facts) -> list[Finding]:
    """Schedules of `facts.namespace` that missed slots: none yet (see above)."""
    del facts
    return []

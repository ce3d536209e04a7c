"""`bench.schedule_pass` measures passes over schedules that exist and are
not due: each was created and looked at once (it knows when it is due), and a
broken set-up fails here instead of printing a number."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

from bench import schedule_pass
from orchestrator.store.store import Store


async def test_a_pass_over_schedules_not_due_is_measured(tmp_path: Path) -> None:
    ms = await schedule_pass.cpu_per_pass(20, 2, tmp_path)
    assert ms >= 0 and math.isfinite(ms)
    store = await Store.open(f"sqlite:///{tmp_path / 'weft.db'}")
    try:
        rows = await store.schedules.find(None)
    finally:
        await store.close()
    assert len(rows) == 20
    assert all(r.due_at is not None and r.due_at > datetime.now(UTC) for r in rows)

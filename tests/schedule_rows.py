"""A `ScheduleRow` for tests of the schedule rules, with every field set to a
plain default: a test names only what it is about."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from orchestrator.store.schedules import ScheduleRow


def schedule_row(created_at: datetime, **fields: object) -> ScheduleRow:
    base = ScheduleRow(
        namespace="default",
        name="s",
        workflow_type="report",
        task_list="tl",
        input=None,
        cron="",
        every=60.0,
        timezone="",
        overlap="allow",
        catch_up_window=3600.0,
        jitter=0.0,
        start_at=None,
        end_at=None,
        paused=False,
        note="",
        created_at=created_at,
        updated_at=created_at,
    )
    return replace(base, **fields)  # type: ignore[arg-type]

"""Jinja filters: times, ages, durations, JSON and one-line event summaries."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from sdk.events import Event

# The attributes that say what an event is about, in the order they are shown.
_SUMMARY_KEYS = (
    "activity_type",
    "activity_id",
    "timer_id",
    "start_to_fire_timeout",
    "signal_name",
    "marker_name",
    "lock_name",
    "workflow_type",
    "child_workflow_id",
    "task_list",
    "identity",
    "attempt",
    "timeout_type",
    "reason",
    "cause",
    "input",
    "result",
)


def timestamp(moment: datetime | None) -> str:
    if moment is None:
        return "—"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def duration(span: timedelta | float | None) -> str:
    """3d 4h, 2h 5m, 4m 10s, 12.3s, 250ms."""
    if span is None:
        return "—"
    seconds = span.total_seconds() if isinstance(span, timedelta) else float(span)
    if seconds <= 0:
        return "0s" if seconds == 0 else "-" + duration(-seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"


def age(moment: datetime | None, now: datetime | None = None) -> str:
    if moment is None:
        return "—"
    return duration((now or datetime.now(UTC)) - moment)


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str, sort_keys=False)


def summary(event: Event, limit: int = 140) -> str:
    parts = []
    for name in _SUMMARY_KEYS:
        value = event.attributes.get(name)
        if value not in (None, "", [], {}):
            if isinstance(value, dict) and "name" in value:  # a workflow or activity type
                version = value.get("version")
                value = f"{value['name']} v{version}" if version else value["name"]
            shown = value if isinstance(value, str | int | float) else json.dumps(value)
            parts.append(f"{name}={shown}")
    text = " ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


FILTERS = {
    "timestamp": timestamp,
    "duration": duration,
    "age": age,
    "pretty": pretty,
    "summary": summary,
}

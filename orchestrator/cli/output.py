"""How the client commands print: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click

from sdk.events import Event

# Attributes that only cross-reference other events; the table leaves them out.
_QUIET = frozenset({"decider_completed_event_id", "started_event_id", "traceback"})
CELL = 60
LINE = 160


def print_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, ensure_ascii=False, default=str))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def moment(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def clock(value: datetime) -> str:
    return value.astimezone().strftime("%H:%M:%S.%f")[:-3]


def compact(value: Any, limit: int = CELL) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def span(seconds: float) -> str:
    """Seconds as people write durations: 500ms, 10s, 5m, 2h30m, 365d."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    out, rest = "", round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out


def summary(event: Event) -> str:
    """The attributes that matter, as `key=value`, on one line."""
    parts = []
    for key, value in event.attributes.items():
        if key in _QUIET:
            continue
        if key in ("workflow_type", "activity_type") and isinstance(value, dict):
            value = value.get("name", "") + (f"@{value['version']}" if value.get("version") else "")
        elif key == "details" and isinstance(value, dict) and "message" in value:
            value = value["message"]
        elif key.endswith("_timeout") and isinstance(value, int | float):
            value = span(value)
        parts.append(f"{key.removesuffix('_timeout')}={compact(value)}")
    text = " ".join(parts)
    return text if len(text) <= LINE else text[: LINE - 1] + "…"


HISTORY_HEADERS = ("ID", "TIME", "TYPE", "DETAILS")


def history_row(event: Event) -> tuple[str, str, str, str]:
    return (str(event.event_id), clock(event.timestamp), event.type, summary(event))

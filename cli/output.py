"""How the client commands print: aligned tables for people, JSON for scripts.

Whatever they print passes through here, and here only, control characters in
it are written as escapes (`\\x1b`): ids, names, payloads and messages are
anybody's text, and an escape sequence in them must never reach the terminal
(to retitle the window, move the cursor, rewrite what was printed above…)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click

from sdk.events import Event

# Attributes that only cross-reference other events; the table leaves them out.
_QUIET = frozenset({"decider_completed_event_id", "started_event_id", "traceback"})
CELL = 60
LINE = 160


# C0 controls (newline and tab aside: they are layout), DEL and the C1 controls
# (0x9b alone starts a sequence on some terminals).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# The same and newline and tab, for text that must stay on one line (a cell).
_CONTROL_IN_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# What `json.dumps` leaves raw: it escapes C0 controls itself.
_CONTROL_IN_JSON = re.compile(r"[\x7f-\x9f]")


def printable(text: str, *, one_line: bool = False) -> str:
    """`text` with its control characters written as `\\xNN`."""
    pattern = _CONTROL_IN_LINE if one_line else _CONTROL
    return pattern.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def echo(text: str) -> None:
    """Print a line of output for people."""
    click.echo(printable(text))


def json_text(doc: Any, indent: int | None = None) -> str:
    """`doc` as JSON with no control character raw (the same document)."""
    text = json.dumps(doc, indent=indent, ensure_ascii=False, default=str)
    return _CONTROL_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def print_json(doc: Any) -> None:
    click.echo(json_text(doc, indent=2))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    rows = [[printable(cell, one_line=True) for cell in row] for row in rows]
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
    # Who acted comes first, so that a long line never cuts it off; it is what the
    # server authenticated, next to the self-declared identity among the attributes.
    parts = [f"principal={event.principal}"] if event.principal else []
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
    row = (str(event.event_id), clock(event.timestamp), event.type, summary(event))
    return (row[0], row[1], printable(row[2], one_line=True), printable(row[3], one_line=True))

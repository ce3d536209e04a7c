"""A run's history as a timeline: lanes of segments (activities, timers, children,
decision tasks) and points (signals, markers, locks, requests, start and close),
built from the events alone, and drawn as server-side SVG.

Pure: no I/O, and the clock is passed in (`now`, where an open run's lanes end).
The SVG reads with JavaScript off; only what falls in the window is drawn, and
segments or points closer than a pixel are merged, so a history of 10,000+
events draws in a few milliseconds and a few hundred kilobytes at most.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from markupsafe import Markup, escape

from sdk.events import CLOSE_TYPES, Event

SEGMENT_STATES = (
    "scheduled",
    "running",
    "completed",
    "failed",
    "timed-out",
    "canceled",
    "fired",
)
LANE_KINDS = ("decision", "activity", "timer", "child")
_SEVERITY = {
    state: rank
    for rank, state in enumerate(
        ("failed", "timed-out", "canceled", "running", "completed", "fired", "scheduled")
    )
}


@dataclass(slots=True)
class Segment:
    """One phase of a lane: `end` None while it is still open (drawn to the
    timeline's end)."""

    start: datetime
    end: datetime | None
    state: str
    first_event_id: int
    last_event_id: int


@dataclass(slots=True)
class Lane:
    kind: str
    """"activity", "timer", "child" or "decision"."""
    label: str
    segments: list[Segment] = field(default_factory=list)
    key: str = ""
    """What the lane follows: the activity, timer or child workflow id."""


@dataclass(frozen=True, slots=True)
class Point:
    """An event that has no duration: a signal, a marker, a lock event, …"""

    at: datetime
    type: str
    event_id: int
    label: str


@dataclass(slots=True)
class Timeline:
    start: datetime
    end: datetime
    """The close time, or `now` for an open run."""
    lanes: list[Lane]
    points: list[Point]
    open: bool = True
    """Whether the run was still open (its lanes' open segments end at `now`)."""


# -- building ---------------------------------------------------------------------------

_ACTIVITY_CLOSE = {
    "ActivitySuccess": "completed",
    "ActivityFailed": "failed",
    "ActivityTimedOut": "timed-out",
    "ActivityScheduledTimeout": "timed-out",
    "ActivityCanceled": "canceled",
}
_DECIDER_CLOSE = {
    "DeciderCompleted": "completed",
    "DeciderFailed": "failed",
    "DeciderTimedOut": "timed-out",
}
_TIMER_CLOSE = {"TimerExpired": "fired", "TimerCanceled": "canceled"}
_CHILD_CLOSE = {
    "ChildWorkflowSuccess": "completed",
    "ChildWorkflowFailed": "failed",
    "ChildWorkflowTimedOut": "timed-out",
    "ChildWorkflowCanceled": "canceled",
    "ChildWorkflowTerminated": "failed",
}


class _Builder:
    def __init__(self) -> None:
        self.decision = Lane("decision", "decision tasks")
        self.lanes: dict[tuple[str, str], Lane] = {}
        # The open segment of each scheduled thing, by its scheduling event id.
        self.activities: dict[int, tuple[Lane, Segment]] = {}
        self.deciders: dict[int, Segment] = {}
        self.timers: dict[str, tuple[Lane, Segment]] = {}
        self.children: dict[int, tuple[Lane, Segment]] = {}
        self.points: list[Point] = []

    def lane(self, kind: str, key: str, label: str) -> Lane:
        found = self.lanes.get((kind, key))
        if found is None:
            found = self.lanes[(kind, key)] = Lane(kind, label, key=key)
        return found

    def add(self, e: Event) -> None:
        kind = e.type
        if kind.startswith("Decider"):
            self._decider(e)
        elif kind in ("ActivityScheduled", "ActivityStarted") or kind in _ACTIVITY_CLOSE:
            self._activity(e)
        elif kind == "TimerScheduled" or kind in _TIMER_CLOSE:
            self._timer(e)
        elif kind == "ChildWorkflowStarted" or kind in _CHILD_CLOSE:
            self._child(e)
        else:
            self.points.append(Point(e.timestamp, kind, e.event_id, point_label(e)))

    def _decider(self, e: Event) -> None:
        segments = self.decision.segments
        if e.type == "DeciderScheduled":
            seg = Segment(e.timestamp, None, "scheduled", e.event_id, e.event_id)
            segments.append(seg)
            self.deciders[e.event_id] = seg
            return
        scheduled = int(e.get("scheduled_event_id", 0))
        seg_or_none = self.deciders.get(scheduled)
        if seg_or_none is None:
            self.points.append(Point(e.timestamp, e.type, e.event_id, point_label(e)))
            return
        seg = seg_or_none
        if e.type == "DeciderStarted":
            if seg.state == "scheduled":
                seg.end, seg.last_event_id = e.timestamp, e.event_id
                running = Segment(e.timestamp, None, "running", e.event_id, e.event_id)
                segments.append(running)
                self.deciders[scheduled] = running
            return
        state = _DECIDER_CLOSE.get(e.type)
        if state is None:
            self.points.append(Point(e.timestamp, e.type, e.event_id, point_label(e)))
            return
        seg.end, seg.state, seg.last_event_id = e.timestamp, state, e.event_id
        del self.deciders[scheduled]

    def _activity(self, e: Event) -> None:
        if e.type == "ActivityScheduled":
            activity_id = str(e.get("activity_id", ""))
            name = str((e.get("activity_type") or {}).get("name", ""))
            label = f"activity {activity_id} · {name}" if name else f"activity {activity_id}"
            lane = self.lane("activity", activity_id, label)
            seg = Segment(e.timestamp, None, "scheduled", e.event_id, e.event_id)
            lane.segments.append(seg)
            self.activities[e.event_id] = (lane, seg)
            return
        scheduled = int(e.get("scheduled_event_id", 0))
        found = self.activities.get(scheduled)
        if found is None:
            self.points.append(Point(e.timestamp, e.type, e.event_id, point_label(e)))
            return
        lane, seg = found
        if e.type == "ActivityStarted":
            seg.end, seg.last_event_id = e.timestamp, e.event_id
            running = Segment(e.timestamp, None, "running", e.event_id, e.event_id)
            lane.segments.append(running)
            self.activities[scheduled] = (lane, running)
            return
        seg.end, seg.state, seg.last_event_id = e.timestamp, _ACTIVITY_CLOSE[e.type], e.event_id
        del self.activities[scheduled]

    def _timer(self, e: Event) -> None:
        timer_id = str(e.get("timer_id", ""))
        if e.type == "TimerScheduled":
            lane = self.lane("timer", timer_id, f"timer {timer_id}")
            seg = Segment(e.timestamp, None, "running", e.event_id, e.event_id)
            lane.segments.append(seg)
            self.timers[timer_id] = (lane, seg)
            return
        found = self.timers.pop(timer_id, None)
        if found is None:
            self.points.append(Point(e.timestamp, e.type, e.event_id, point_label(e)))
            return
        _, seg = found
        seg.end, seg.state, seg.last_event_id = e.timestamp, _TIMER_CLOSE[e.type], e.event_id

    def _child(self, e: Event) -> None:
        if e.type == "ChildWorkflowStarted":
            workflow_id = str(e.get("workflow_id", ""))
            name = str((e.get("workflow_type") or {}).get("name", ""))
            label = f"child {workflow_id} · {name}" if name else f"child {workflow_id}"
            lane = self.lane("child", workflow_id, label)
            seg = Segment(e.timestamp, None, "running", e.event_id, e.event_id)
            lane.segments.append(seg)
            self.children[e.event_id] = (lane, seg)
            return
        found = self.children.pop(int(e.get("started_event_id", 0)), None)
        if found is None:
            self.points.append(Point(e.timestamp, e.type, e.event_id, point_label(e)))
            return
        _, seg = found
        seg.end, seg.state, seg.last_event_id = e.timestamp, _CHILD_CLOSE[e.type], e.event_id


def build_timeline(events: Sequence[Event], *, now: datetime) -> Timeline:
    """The timeline of one run's history (in event order). An open run ends at
    `now` (or its last event, if the clocks disagree); a closed one at its close."""
    builder = _Builder()
    for event in events:
        builder.add(event)
    lanes = list(builder.lanes.values())
    if builder.decision.segments:
        lanes.insert(0, builder.decision)
    if not events:
        return Timeline(now, now, lanes, builder.points, open=True)
    start = events[0].timestamp
    last = events[-1]
    closed = last.type in CLOSE_TYPES
    end = last.timestamp if closed else max(now, last.timestamp)
    return Timeline(start, max(end, start), lanes, builder.points, open=not closed)


def point_label(e: Event) -> str:
    """One line saying what a point event was."""
    get = e.get
    match e.type:
        case "WorkflowStarted":
            name = (get("workflow_type") or {}).get("name", "")
            return f"started {name}".strip()
        case "WorkflowFailed" | "WorkflowTerminated":
            return f"{e.type}: {get('reason', '')}".rstrip(": ")
        case "WorkflowTimedOut":
            return f"timed out ({get('timeout_type', '')})"
        case "WorkflowContinuedAsNew":
            return f"continued as new → {get('new_run_id', '')}"
        case "WorkflowCancelRequested":
            return f"cancel requested {get('reason', '')}".strip()
        case "Signal":
            return f"signal {get('signal_name', '')}"
        case "Marker":
            return _marker_label(e)
        case "LockRequested" | "LockAcquired" | "LockReleased":
            verb = e.type.removeprefix("Lock").lower()
            extra = " (forced)" if get("forced") else ""
            return f"lock {get('lock_name', '')} {verb}{extra}"
        case "ReplayRequested":
            return f"replay {get('mode', '')} {get('step', '')}".strip()
        case "ExternalWorkflowSignaled":
            return f"signaled {get('workflow_id', '')}: {get('signal_name', '')}"
        case "ActivityCancelRequested":
            return f"cancel activity {get('activity_id', '')}"
    cause = get("cause") or get("reason")
    return f"{e.type}: {cause}" if cause else e.type


def _marker_label(e: Event) -> str:
    name = str(e.get("marker_name", ""))
    details = e.get("details")
    if name == "step" and isinstance(details, dict):
        step = details.get("id") or f"#{details.get('index')}"
        return f"step {details.get('key', '')} {details.get('type', '')} {step}".strip()
    return f"marker {name}"


# -- drawing ----------------------------------------------------------------------------

LABEL_WIDTH = 230
RIGHT_MARGIN = 14
AXIS_HEIGHT = 34
ROW = 20
BAR = 12
_TICK_STEPS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
    1, 2, 5, 10, 15, 30,
    60, 120, 300, 600, 900, 1800,
    3600, 7200, 10800, 21600, 43200,
    86400, 172800, 604800, 1209600, 2592000, 7776000, 31536000,
)  # fmt: skip
_MIN_TICK_PX = 95
_STYLE = (
    ".weft-timeline{font:11px system-ui,sans-serif}"
    ".weft-timeline .axis line{stroke:#c8ccd2}"
    ".weft-timeline .axis text,.weft-timeline .caption{fill:#4a5160}"
    ".weft-timeline .lane-label{fill:#1f2430}"
    ".weft-timeline .lane:nth-of-type(even) .band{fill:#f4f6f9}"
    ".weft-timeline .band{fill:transparent}"
    ".weft-timeline .segment.scheduled{fill:#c9d3e3}"
    ".weft-timeline .segment.running{fill:#5b9bd5}"
    ".weft-timeline .segment.completed{fill:#3f9d5a}"
    ".weft-timeline .segment.fired{fill:#8a7cc2}"
    ".weft-timeline .segment.canceled{fill:#a3a8b1}"
    ".weft-timeline .segment.failed{fill:#d0433c}"
    ".weft-timeline .segment.timed-out{fill:#e08a1e}"
    ".weft-timeline .glyph{stroke:#7d1a15;stroke-width:2;fill:none}"
    ".weft-timeline .glyph.timed-out{stroke:#8a4f00}"
    ".weft-timeline .point circle{fill:#2d6cb5}"
    ".weft-timeline .point.failed circle{fill:#d0433c}"
    ".weft-timeline .point.lock circle{fill:#b8860b}"
    ".weft-timeline .point.close circle{fill:#1f2430}"
    ".weft-timeline .now{stroke:#d0433c;stroke-dasharray:3 3}"
)


def render_svg(
    timeline: Timeline,
    *,
    window: tuple[datetime, datetime] | None = None,
    width: int = 1100,
    max_lanes: int = 200,
    lane_offset: int = 0,
) -> Markup:
    """The timeline as an SVG element: a time axis, one row of points, then the
    lanes `lane_offset` to `lane_offset + max_lanes`, drawn within `window`
    (default: the whole run). Every label is escaped."""
    w0, w1 = window if window is not None else (timeline.start, timeline.end)
    if w1 <= w0:
        w1 = w0 + timedelta(seconds=1)
    t0, span = w0.timestamp(), (w1 - w0).total_seconds()
    plot = max(width - LABEL_WIDTH - RIGHT_MARGIN, 50)
    scale = plot / span
    lanes = timeline.lanes[max(lane_offset, 0) : max(lane_offset, 0) + max(max_lanes, 0)]
    height = AXIS_HEIGHT + ROW * (len(lanes) + 1) + 6
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="weft-timeline" width="{width}"'
        f' height="{height}" viewBox="0 0 {width} {height}" role="img"'
        f' aria-label="timeline of {len(timeline.lanes)} lanes">',
        f"<style>{_STYLE}</style>",
    ]
    out.extend(_axis(w0, w1, t0, span, scale, plot, height))
    out.extend(_points(timeline.points, t0, span, scale))
    end_ts = timeline.end.timestamp()
    for row, lane in enumerate(lanes, start=1):
        out.extend(_lane(lane, AXIS_HEIGHT + ROW * row, t0, span, scale, plot, end_ts))
    if timeline.open and 0 <= end_ts - t0 <= span:
        x = LABEL_WIDTH + (end_ts - t0) * scale
        out.append(
            f'<line class="now" x1="{x:.1f}" y1="{AXIS_HEIGHT - 6}" x2="{x:.1f}"'
            f' y2="{height - 4}"><title>now</title></line>'
        )
    out.append("</svg>")
    return Markup("".join(out))


def _axis(
    w0: datetime, w1: datetime, t0: float, span: float, scale: float, plot: int, height: int
) -> list[str]:
    step = next((s for s in _TICK_STEPS if s * scale >= _MIN_TICK_PX), _TICK_STEPS[-1])
    fmt = _tick_format(step)
    out = [
        '<g class="axis">',
        f'<text class="caption" x="4" y="12">{escape(_when(w0))} UTC</text>',
        f'<text class="caption" x="4" y="26">window {escape(_span_text(span))}</text>',
    ]
    first = (t0 // step + 1) * step if t0 % step else t0
    tick = first
    day: date | None = None
    while tick <= t0 + span + 1e-9:
        x = LABEL_WIDTH + (tick - t0) * scale
        moment = datetime.fromtimestamp(tick, UTC)
        text = moment.strftime(fmt)
        if step < 1:
            text = text[:-3]  # milliseconds
        elif step < 86400 and moment.date() != day:
            # Each new day's first tick says which day (the caption has the year).
            text = moment.strftime("%d %b ") + text if day is not None else text
        day = moment.date()
        # A label at the right edge ends there rather than being cut off.
        anchor = "end" if x > LABEL_WIDTH + plot - 4 * len(text) else "middle"
        out.append(
            f'<line x1="{x:.1f}" y1="{AXIS_HEIGHT - 8}" x2="{x:.1f}" y2="{height - 4}"/>'
            f'<text x="{x:.1f}" y="{AXIS_HEIGHT - 11}" text-anchor="{anchor}">{text}</text>'
        )
        tick = first + round((tick - first) / step + 1) * step
    out.append("</g>")
    return out


def _tick_format(step: float) -> str:
    if step < 1:
        return "%H:%M:%S.%f"
    if step < 60:
        return "%H:%M:%S"
    if step < 86400:
        return "%H:%M"
    return "%Y-%m-%d"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _span_text(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    return " ".join(f"{n}{unit}" for n, unit in parts if n) or "0s"


def _point_class(kind: str) -> str:
    if "Failed" in kind or "TimedOut" in kind or kind == "WorkflowTerminated":
        return "point failed"
    if kind.startswith("Lock"):
        return "point lock"
    if kind in CLOSE_TYPES:
        return "point close"
    return "point"


def _points(points: Iterable[Point], t0: float, span: float, scale: float) -> list[str]:
    """The points row. Points of one type within a pixel of each other are one
    mark whose tooltip counts them."""
    y = AXIS_HEIGHT + ROW // 2
    merged: dict[tuple[str, int], list[Point]] = {}
    for p in points:
        offset = p.at.timestamp() - t0
        if 0 <= offset <= span:
            merged.setdefault((p.type, int(offset * scale)), []).append(p)
    out = ['<g class="points">']
    for (kind, px), group in merged.items():
        x = LABEL_WIDTH + px
        first = group[0]
        if len(group) == 1:
            tip = f"{first.type} #{first.event_id} at {_when(first.at)}: {first.label}"
        else:
            tip = (
                f"{len(group)} x {kind}, #{first.event_id}-#{group[-1].event_id},"
                f" from {_when(first.at)}"
            )
        out.append(
            f'<g class="{_point_class(kind)}" data-type="{escape(kind)}"'
            f' data-event-id="{first.event_id}"><title>{escape(tip)}</title>'
            f'<circle cx="{x}" cy="{y}" r="{4 if len(group) == 1 else 5}"/></g>'
        )
    out.append("</g>")
    return out


def _lane(
    lane: Lane, top: int, t0: float, span: float, scale: float, plot: int, end_ts: float
) -> list[str]:
    label = lane.label if len(lane.label) <= 34 else lane.label[:33] + "…"
    out = [
        f'<g class="lane" data-kind="{escape(lane.kind)}" data-label="{escape(lane.label)}">'
        f'<rect class="band" x="0" y="{top}" width="{LABEL_WIDTH + plot}" height="{ROW}"/>'
        f'<text class="lane-label" x="4" y="{top + ROW - 6}"><title>{escape(lane.label)}'
        f"</title>{escape(label)}</text>"
    ]
    w1 = t0 + span
    y = top + (ROW - BAR) // 2
    # Segments under a pixel wide that touch the rect before them join it (it
    # takes the most severe state of its parts), as do neighbours of one state:
    # a lane of thousands of short tasks stays a few hundred rects.
    drawn: list[tuple[float, float, str, list[Segment]]] = []
    for seg in lane.segments:
        s = seg.start.timestamp()
        e = seg.end.timestamp() if seg.end is not None else end_ts
        if e < t0 or s > w1:
            continue
        x = (max(s, t0) - t0) * scale
        x_end = (min(e, w1) - t0) * scale
        if drawn and x <= drawn[-1][1] + 1:
            prev = drawn[-1]
            if prev[2] == seg.state or x_end - x < 1 or prev[1] - prev[0] < 1:
                state = min(prev[2], seg.state, key=_SEVERITY.__getitem__)
                prev[3].append(seg)
                drawn[-1] = (prev[0], max(prev[1], x_end), state, prev[3])
                continue
        drawn.append((x, x_end, seg.state, [seg]))
    for x, x_end, state, group in drawn:
        w = max(x_end - x, 2.0)
        left = LABEL_WIDTH + x
        first, last = group[0], group[-1]
        if len(group) == 1:
            until = _when(first.end) if first.end is not None else "(open)"
            tip = (
                f"{lane.label}: {state} {_when(first.start)} - {until}"
                f" (events #{first.first_event_id}-#{first.last_event_id})"
            )
        else:
            counts: dict[str, int] = {}
            for part in group:
                counts[part.state] = counts.get(part.state, 0) + 1
            parts = ", ".join(f"{n} {kind}" for kind, n in counts.items())
            tip = (
                f"{lane.label}: {len(group)} segments ({parts})"
                f" (events #{first.first_event_id}-#{last.last_event_id})"
            )
        open_attr = ' data-open="true"' if last.end is None else ""
        out.append(
            f'<rect class="segment {state}" x="{left:.1f}" y="{y}" width="{w:.1f}"'
            f' height="{BAR}" data-first-event-id="{first.first_event_id}"{open_attr}>'
            f"<title>{escape(tip)}</title></rect>"
        )
        if state in ("failed", "timed-out"):
            out.append(_glyph(state, left + w, y + BAR / 2))
    out.append("</g>")
    return out


def _glyph(state: str, x: float, y: float) -> str:
    """A mark at the end of a failed (a cross) or timed-out (a clock) segment,
    so they show without relying on colour."""
    if state == "failed":
        return (
            f'<path class="glyph failed" d="M{x - 4:.1f} {y - 4:.1f}l8 8m0 -8l-8 8"'
            ' aria-label="failed"/>'
        )
    return (
        f'<g class="glyph timed-out" aria-label="timed out"><circle cx="{x:.1f}" cy="{y:.1f}"'
        f' r="5"/><path d="M{x:.1f} {y - 3:.1f}v3h2.5"/></g>'
    )


# -- zooming ----------------------------------------------------------------------------

MIN_WINDOW = timedelta(milliseconds=10)


def zoom_windows(
    timeline: Timeline, window: tuple[datetime, datetime] | None
) -> dict[str, tuple[datetime, datetime] | None]:
    """The windows of the zoom controls: "in" (half the span, same centre),
    "out" (double, kept within the run), "left"/"right" (half a span earlier or
    later, kept within the run) and "reset" (None: the whole run)."""
    start, end = timeline.start, timeline.end
    w0, w1 = window if window is not None else (start, end)
    span = max(w1 - w0, MIN_WINDOW)
    centre = w0 + (w1 - w0) / 2
    half = max(span / 2, MIN_WINDOW)
    zoom_in = (centre - half / 2, centre + half / 2)
    wide = min(span * 2, max(end - start, MIN_WINDOW))
    zoom_out = _within(centre - wide / 2, wide, start, end)
    return {
        "in": zoom_in,
        "out": zoom_out,
        "left": _within(w0 - span / 2, span, start, end),
        "right": _within(w0 + span / 2, span, start, end),
        "reset": None,
    }


def _within(
    begin: datetime, span: timedelta, start: datetime, end: datetime
) -> tuple[datetime, datetime]:
    """A window of `span` from `begin`, moved to lie within [start, end] where it fits."""
    if begin + span > end:
        begin = end - span
    begin = max(begin, start)
    return begin, begin + span

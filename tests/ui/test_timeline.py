"""The timeline of a run (webui/timeline.py): lanes and points built from hand-made
histories for the edge cases (retries, timeouts, cancelled timers, a child, an
open run, the decision lane), the SVG drawn from them (window clipping, lane
paging, escaping, failure marks), a 10,000-event history, and a real step
workflow's history from an in-process server."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.server import Server
from sdk import AsyncClient, Event
from tests.steps.activities import echo, explode
from tests.steps.harness import run_steps
from webui.timeline import (
    LABEL_WIDTH,
    RIGHT_MARGIN,
    Timeline,
    build_timeline,
    render_svg,
    zoom_windows,
)

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"


class History:
    """A hand-made history: each event one second after the last unless `at` says
    when (seconds after T0)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.clock = 0.0

    def add(self, kind: str, at: float | None = None, **attributes: Any) -> int:
        self.clock = self.clock + 1 if at is None else at
        event_id = len(self.events) + 1
        self.events.append(Event(event_id, kind, T0 + timedelta(seconds=self.clock), attributes))
        return event_id

    def start(self) -> int:
        return self.add("WorkflowStarted", at=0, workflow_type={"name": "orders"})

    def activity(self, activity_id: str, name: str, close: str | None, **extra: Any) -> int:
        scheduled = self.add(
            "ActivityScheduled", activity_id=activity_id, activity_type={"name": name}
        )
        started = self.add("ActivityStarted", scheduled_event_id=scheduled)
        if close is not None:
            self.add(close, scheduled_event_id=scheduled, started_event_id=started, **extra)
        return scheduled

    def decision(self) -> None:
        scheduled = self.add("DeciderScheduled")
        started = self.add("DeciderStarted", scheduled_event_id=scheduled)
        self.add("DeciderCompleted", scheduled_event_id=scheduled, started_event_id=started)


def parse(svg: str) -> ET.Element:
    """The SVG as XML: it must be well-formed to be drawn at all."""
    return ET.fromstring(svg)


def lanes_of(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == "lane"]


def segments_of(lane: ET.Element) -> list[ET.Element]:
    return [r for r in lane.iter(f"{SVG}rect") if (r.get("class") or "").startswith("segment")]


def lane_by_label(timeline: Timeline, label: str) -> Any:
    return next(lane for lane in timeline.lanes if lane.label == label)


# -- building ---------------------------------------------------------------------------


def test_activity_retry_in_one_lane_and_its_timeouts() -> None:
    h = History()
    h.start()
    h.decision()
    h.activity("3", "charge_card", "ActivityFailed", reason="declined")
    h.activity("3", "charge_card", "ActivitySuccess")
    h.activity("4", "ship", "ActivityTimedOut", timeout_type="START_TO_CLOSE")
    never = h.add("ActivityScheduled", activity_id="5", activity_type={"name": "notify"})
    h.add("ActivityScheduledTimeout", scheduled_event_id=never, timeout_type="SCHEDULE_TO_START")
    h.add("WorkflowSuccess")
    timeline = build_timeline(h.events, now=T0 + timedelta(days=1))

    assert [lane.kind for lane in timeline.lanes] == [
        "decision",
        "activity",
        "activity",
        "activity",
    ]
    charge = lane_by_label(timeline, "activity 3 · charge_card")
    assert [s.state for s in charge.segments] == ["scheduled", "failed", "scheduled", "completed"]
    # Each phase ends where the next begins, and names the events it spans.
    assert charge.segments[0].end == charge.segments[1].start
    assert (charge.segments[1].first_event_id, charge.segments[1].last_event_id) == (6, 7)
    assert [s.state for s in lane_by_label(timeline, "activity 4 · ship").segments] == [
        "scheduled",
        "timed-out",
    ]
    assert [s.state for s in lane_by_label(timeline, "activity 5 · notify").segments] == [
        "timed-out"
    ]
    # Closed: the timeline ends at the close, not at `now`.
    assert not timeline.open
    assert timeline.end == h.events[-1].timestamp
    assert all(s.end is not None for lane in timeline.lanes for s in lane.segments)


def test_timers_children_and_decision_tasks() -> None:
    h = History()
    h.start()
    first = h.add("DeciderScheduled")
    started = h.add("DeciderStarted", scheduled_event_id=first)
    # Seed 002 #13: scheduled while the first task is started.
    second = h.add("DeciderScheduled")
    h.add("DeciderTimedOut", scheduled_event_id=first, started_event_id=started)
    again = h.add("DeciderStarted", scheduled_event_id=second)
    h.add("DeciderFailed", scheduled_event_id=second, started_event_id=again, cause="BAD")
    h.add("TimerScheduled", timer_id="t1", start_to_fire_timeout=5.0)
    h.add("TimerScheduled", timer_id="t2", start_to_fire_timeout=50.0)
    h.add("TimerExpired", timer_id="t1")
    h.add("TimerCanceled", timer_id="t2")
    child = h.add(
        "ChildWorkflowStarted", workflow_id="order-7", run_id="r", workflow_type={"name": "o"}
    )
    h.add("ChildWorkflowFailed", workflow_id="order-7", started_event_id=child, reason="no")
    other = h.add("ChildWorkflowStarted", workflow_id="order-8", run_id="r2")
    h.add("ChildWorkflowTerminated", workflow_id="order-8", started_event_id=other)
    dropped = h.add("ActivityScheduled", activity_id="9", activity_type={"name": "late"})
    h.add("ActivityCancelRequested", activity_id="9")
    h.add("ActivityCanceled", scheduled_event_id=dropped)
    h.add("WorkflowFailed", reason="ChildFailed")
    timeline = build_timeline(h.events, now=T0)

    decision = timeline.lanes[0]
    assert decision.kind == "decision"
    assert [s.state for s in decision.segments] == ["scheduled", "timed-out", "scheduled", "failed"]
    assert [s.state for s in lane_by_label(timeline, "timer t1").segments] == ["fired"]
    assert [s.state for s in lane_by_label(timeline, "timer t2").segments] == ["canceled"]
    assert [s.state for s in lane_by_label(timeline, "child order-7 · o").segments] == ["failed"]
    assert [s.state for s in lane_by_label(timeline, "child order-8").segments] == ["failed"]
    # Cancelled before it started: its only segment says so.
    assert [s.state for s in lane_by_label(timeline, "activity 9 · late").segments] == ["canceled"]
    assert [(p.type, p.label) for p in timeline.points] == [
        ("WorkflowStarted", "started orders"),
        ("ActivityCancelRequested", "cancel activity 9"),
        ("WorkflowFailed", "WorkflowFailed: ChildFailed"),
    ]


def test_an_open_run_is_drawn_to_now() -> None:
    h = History()
    h.start()
    h.decision()
    h.activity("1", "slow", None)
    h.add("TimerScheduled", timer_id="wait")
    h.add("Signal", signal_name="approve")
    h.add("LockAcquired", lock_name="quota")
    h.add("Marker", marker_name="step", details={"key": "2.1", "index": 2, "type": "sleep"})
    h.add("ReplayRequested", mode="from", step="charge")
    now = T0 + timedelta(minutes=5)
    timeline = build_timeline(h.events, now=now)

    assert timeline.open and timeline.end == now
    slow = lane_by_label(timeline, "activity 1 · slow")
    assert [(s.state, s.end) for s in slow.segments][-1] == ("running", None)
    assert lane_by_label(timeline, "timer wait").segments[0].end is None
    assert [p.label for p in timeline.points] == [
        "started orders",
        "signal approve",
        "lock quota acquired",
        "step 2.1 sleep #2",
        "replay from charge",
    ]

    root = parse(render_svg(timeline, width=1000))
    right = 1000 - RIGHT_MARGIN
    for lane in lanes_of(root):
        if lane.get("data-label") in ("activity 1 · slow", "timer wait"):
            last = segments_of(lane)[-1]
            assert last.get("data-open") == "true"
            assert float(last.get("x", 0)) + float(last.get("width", 0)) == pytest.approx(
                right, abs=0.2
            )
    assert any(line.get("class") == "now" for line in root.iter(f"{SVG}line"))


def test_an_empty_history_and_a_clock_behind_the_events() -> None:
    empty = build_timeline([], now=T0)
    assert (empty.start, empty.end, empty.lanes, empty.points) == (T0, T0, [], [])
    parse(render_svg(empty))
    h = History()
    h.start()
    h.decision()
    # `now` older than the last event (another node's clock): the run still ends after it.
    timeline = build_timeline(h.events, now=T0)
    assert timeline.end == h.events[-1].timestamp


# -- drawing ----------------------------------------------------------------------------


def test_failures_and_timeouts_are_marked_and_points_have_tooltips() -> None:
    h = History()
    h.start()
    h.decision()
    h.activity("1", "charge", "ActivityFailed", reason="declined")
    h.activity("2", "ship", "ActivityTimedOut", timeout_type="HEARTBEAT")
    signal = h.add("Signal", signal_name="approve")
    h.add("WorkflowFailed", reason="boom")
    root = parse(render_svg(build_timeline(h.events, now=T0)))

    classes = [r.get("class") for lane in lanes_of(root) for r in segments_of(lane)]
    assert "segment failed" in classes and "segment timed-out" in classes
    glyphs = [el.get("class") for el in root.iter() if "glyph" in (el.get("class") or "").split()]
    assert glyphs == ["glyph failed", "glyph timed-out"]
    points = {
        g.get("data-type"): g
        for g in root.iter(f"{SVG}g")
        if "point" in (g.get("class") or "").split()
    }
    assert set(points) == {"WorkflowStarted", "Signal", "WorkflowFailed"}
    title = points["Signal"].find(f"{SVG}title")
    assert title is not None and title.text is not None
    assert "Signal" in title.text and f"#{signal}" in title.text and "approve" in title.text
    assert "2025-03-01 12:00:" in title.text
    assert "failed" in (points["WorkflowFailed"].get("class") or "")
    # The axis has readable tick labels.
    ticks = [t.text or "" for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "middle"]
    assert len(ticks) >= 3 and all(re.fullmatch(r"12:00:\d\d", t) for t in ticks)


def test_only_the_window_is_drawn_and_segments_are_clipped() -> None:
    h = History()
    h.start()
    h.activity("early", "a", "ActivitySuccess")  # 1s..3s
    h.add("Signal", at=4, signal_name="before")
    long = h.add("ActivityScheduled", at=10, activity_id="long", activity_type={"name": "b"})
    started = h.add("ActivityStarted", at=11, scheduled_event_id=long)
    h.add("ActivitySuccess", at=100, scheduled_event_id=long, started_event_id=started)
    h.add("Signal", at=50, signal_name="inside")
    h.add("WorkflowSuccess", at=101)
    timeline = build_timeline(h.events, now=T0)
    window = (T0 + timedelta(seconds=40), T0 + timedelta(seconds=60))
    width = 800
    root = parse(render_svg(timeline, window=window, width=width))

    lanes = {lane.get("data-label"): segments_of(lane) for lane in lanes_of(root)}
    # Every lane keeps its row, but only what overlaps the window is drawn.
    assert lanes["activity early · a"] == []
    (clipped,) = lanes["activity long · b"]
    assert clipped.get("class") == "segment completed"
    assert float(clipped.get("x", 0)) == pytest.approx(LABEL_WIDTH, abs=0.1)
    assert float(clipped.get("width", 0)) == pytest.approx(width - RIGHT_MARGIN - LABEL_WIDTH, 0.01)
    shown = [g.get("data-type") for g in root.iter(f"{SVG}g") if g.get("data-type")]
    assert shown == ["Signal"]  # "inside" only


def test_lanes_are_paged() -> None:
    h = History()
    h.start()
    for n in range(30):
        h.activity(str(n), "work", "ActivitySuccess")
    timeline = build_timeline(h.events, now=T0)
    root = parse(render_svg(timeline, max_lanes=10, lane_offset=5))
    labels = [lane.get("data-label") for lane in lanes_of(root)]
    assert labels == [f"activity {n} · work" for n in range(5, 15)]
    assert lanes_of(parse(render_svg(timeline, max_lanes=10, lane_offset=25)))[-1].get(
        "data-label"
    ) == ("activity 29 · work")
    assert lanes_of(parse(render_svg(timeline, lane_offset=30))) == []


def test_every_label_is_escaped() -> None:
    evil = '<script>alert("x")</script>'
    h = History()
    h.start()
    h.activity(evil, evil, "ActivityFailed", reason=evil)
    h.add("TimerScheduled", timer_id=evil)
    h.add("Signal", signal_name=evil)
    h.add("LockAcquired", lock_name=evil)
    h.add("Marker", marker_name=evil)
    h.add("WorkflowFailed", reason=evil)
    svg = str(render_svg(build_timeline(h.events, now=T0)))
    assert "<script" not in svg
    assert "&lt;script&gt;" in svg
    root = parse(svg)  # quotes in attributes are escaped too
    assert any(lane.get("data-label") == f"activity {evil} · {evil}" for lane in lanes_of(root))


def test_zoom_windows() -> None:
    h = History()
    h.start()
    h.add("WorkflowSuccess", at=100)
    timeline = build_timeline(h.events, now=T0)

    def at(seconds: float) -> datetime:
        return T0 + timedelta(seconds=seconds)

    whole = zoom_windows(timeline, None)
    assert whole["in"] == (at(25), at(75))
    assert whole["out"] == (at(0), at(100))  # never wider than the run
    assert whole["left"] == (at(0), at(100)) and whole["right"] == (at(0), at(100))
    assert whole["reset"] is None
    part = zoom_windows(timeline, (at(20), at(40)))
    assert part["in"] == (at(25), at(35))
    assert part["out"] == (at(10), at(50))
    assert part["left"] == (at(10), at(30))
    assert part["right"] == (at(30), at(50))
    edge = zoom_windows(timeline, (at(80), at(100)))
    assert edge["right"] == (at(80), at(100))  # clamped at the end
    assert edge["out"] == (at(60), at(100))
    assert zoom_windows(timeline, (at(0), at(10)))["left"] == (at(0), at(10))
    # Zooming in stops at a few milliseconds rather than at an empty window.
    tiny = zoom_windows(timeline, (at(1), at(1)))["in"]
    assert tiny is not None and tiny[1] > tiny[0]


# -- size -------------------------------------------------------------------------------


def synthetic(count: int) -> list[Event]:
    """A long run: decision tasks, step markers, activities (every seventh fails)
    and signals, until `count` events."""
    h = History()
    h.start()
    n = 0
    while len(h.events) < count:
        h.decision()
        h.add("Marker", marker_name="step", details={"key": f"{n}.1", "index": n, "type": "x"})
        h.activity(str(n), "work", "ActivitySuccess" if n % 7 else "ActivityFailed")
        if n % 10 == 0:
            h.add("Signal", signal_name=f"s{n}")
        n += 1
    return h.events


def test_ten_thousand_events() -> None:
    events = synthetic(10_000)
    timeline = build_timeline(events, now=events[-1].timestamp + timedelta(seconds=1))
    assert len(timeline.lanes) > 1400
    svg = render_svg(timeline)
    root = parse(svg)
    # Lanes past the page are left to the next page; sub-pixel segments and points
    # are merged, so the drawing stays small whatever the history's length.
    assert len(lanes_of(root)) == 200
    assert len(svg) < 400_000
    assert sum(len(segments_of(lane)) for lane in lanes_of(root)) < 1000
    zoomed = render_svg(
        timeline, window=(events[5000].timestamp, events[5100].timestamp), lane_offset=700
    )
    labels = [lane.get("data-label") for lane in lanes_of(parse(zoomed))]
    assert labels[0] == "activity 699 · work" and len(labels) == 200
    assert 'class="segment' in zoomed


# -- a real run -------------------------------------------------------------------------


@pytest.fixture(params=["sqlite"])
def db_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def client(server: Server) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(f"127.0.0.1:{server.port}", identity="ui-test") as c:
        yield c


async def test_a_real_step_workflow(client: AsyncClient) -> None:
    outcome = await run_steps(
        client,
        """
        steps:
          - step: activity echo
            input: {value: 1}
          - sleep 10ms
          - step: activity explode
            on-error:
              - let handled = yes
          - return done
        """,
        activities=[echo, explode],
    )
    assert outcome.result == "done"
    timeline = build_timeline(outcome.history, now=datetime.now(UTC))
    kinds = [lane.kind for lane in timeline.lanes]
    assert kinds[0] == "decision" and kinds.count("activity") == 2 and kinds.count("timer") == 1
    states = {lane.label.split(" · ")[-1]: lane.segments[-1].state for lane in timeline.lanes}
    assert states["echo"] == "completed" and states["explode"] == "failed"
    assert [lane.segments[-1].state for lane in timeline.lanes if lane.kind == "timer"] == ["fired"]
    assert not timeline.open
    assert timeline.points[0].type == "WorkflowStarted"
    assert timeline.points[-1].type == "WorkflowSuccess"
    assert sum(p.type == "Marker" for p in timeline.points) == 5
    parse(render_svg(timeline))

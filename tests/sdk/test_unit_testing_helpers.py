"""`sdk.testing`: `decide`, `task_for`, `replay` (golden histories), and the JSON form
of events that `weft history --json` writes and `events_from_json` reads."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sdk import Decider, DecisionTask, Event, NonDeterminismError
from sdk.events import events_from_json
from sdk.testing import EPOCH, HistoryBuilder, decide, replay, task_for

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


class Order(Decider):
    """Schedule `a` and a timer; when both are done, record a marker and complete.

    `variant` makes it deviate from what `golden()` records, one way at a time."""

    workflow_type = "order"

    def __init__(self, variant: str = "") -> None:
        self.variant = variant

    def decide(self, task: DecisionTask) -> None:
        v = self.variant
        if task.is_first:
            if v == "timer-first":
                task.start_timer("t1", timedelta(minutes=1))
            act_id = "b" if v == "activity-id" else "a"
            act_type = "crop" if v == "activity-type" else "resize"
            amount = task.input["order"] + (1 if v == "input" else 0)
            task.schedule_activity(act_id, act_type, {"order": amount})
            if v not in ("missing", "timer-first"):
                task.start_timer("t2" if v == "timer-id" else "t1", timedelta(minutes=1))
            if v == "extra":
                task.record_marker("extra")
            return
        a, t1 = task.activities.get("a"), task.timers.get("t1")
        if a and a.status == "succeeded" and t1 and t1.status == "fired":
            task.record_marker("finished" if v == "marker-name" else "done", a.result)
            if v == "kind":
                task.fail("Nope")
            else:
                task.complete(a.result)


class AsyncOrder(Order):
    async def decide(self, task: DecisionTask) -> None:  # type: ignore[override]
        super().decide(task)


def golden() -> HistoryBuilder:
    """What `Order()` records: three completed decision tasks (events 4, 11, 15)."""
    b = HistoryBuilder().started({"order": 7}, workflow_type="order", version="1")
    b.decision_task().decision_completed()  # 2, 3, 4
    b.activity_scheduled("a", "resize", {"order": 7})  # 5, decider_completed_event_id=4
    b.add("TimerScheduled", timer_id="t1", start_to_fire_timeout=60.0, decider_completed_event_id=4)
    b.activity_started("a").activity_succeeded("a", {"size": 3})  # 7, 8
    b.decision_task().decision_completed()  # 9, 10, 11: nothing to decide yet
    b.add("TimerExpired", timer_id="t1", started_event_id=6)  # 12
    b.decision_task().decision_completed()  # 13, 14, 15
    b.add("Marker", marker_name="done", details={"size": 3}, decider_completed_event_id=15)
    b.add("WorkflowSuccess", result={"size": 3}, decider_completed_event_id=15)
    return b


# -- task_for and decide ---------------------------------------------------------------


def test_task_for_defaults_to_the_last_decider_started() -> None:
    events = golden().events
    task = task_for(events)
    assert (task.started_event_id, task.previous_started_event_id) == (14, 10)
    assert (task.workflow_id, task.run_id) == ("test-workflow", "test-run")
    assert (task.workflow_type, task.version) == ("order", "1")
    assert [e.event_id for e in task.history] == list(range(1, 15))
    assert task.decisions == []


@pytest.mark.parametrize(("at", "previous"), [(3, 0), (10, 3), (14, 10)])
def test_task_for_at_each_decider_started(at: int, previous: int) -> None:
    task = task_for(golden().events, at)
    assert (task.started_event_id, task.previous_started_event_id) == (at, previous)
    assert task.history[-1].event_id == at
    assert task.is_first is (previous == 0)


@pytest.mark.parametrize(
    ("events", "at", "message"),
    [
        ([], None, "the history has no DeciderStarted: add decision_task()"),
        (HistoryBuilder().started().signal("s").events, None, "the history has no DeciderStarted"),
        (golden().events, 2, "event 2 is not a DeciderStarted"),
        (golden().events, 4, "event 4 is not a DeciderStarted"),
        (golden().events, 99, "event 99 is not a DeciderStarted"),
        (golden().events, 0, "event 0 is not a DeciderStarted"),
    ],
    ids=["empty", "no-task", "scheduled", "completed", "beyond", "zero"],
)
def test_task_for_refuses(events: list[Event], at: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        task_for(events, at)


def test_task_for_without_workflow_started_has_no_type() -> None:
    task = task_for(HistoryBuilder().decision_task().events)
    assert (task.workflow_type, task.version, task.input) == ("", "", None)


def test_task_for_previous_ignores_a_timed_out_task() -> None:
    b = HistoryBuilder().started({"x": 1}).decision_task()  # 2, 3
    b.add("DeciderTimedOut", scheduled_event_id=2, started_event_id=3).decision_task()  # 4; 5, 6
    task = task_for(b.events)
    assert task.started_event_id == 6
    assert task.previous_started_event_id == 0  # no task was completed yet
    assert task.is_first is True


@pytest.mark.parametrize("decider", [Order(), AsyncOrder()], ids=["sync", "async"])
def test_decide_runs_the_decider(decider: Order) -> None:
    first = decide(decider, golden().events, 3)
    assert [
        (d.kind, d.attributes.get("activity_id") or d.attributes.get("timer_id"))
        for d in first.decisions
    ] == [
        ("ScheduleActivity", "a"),
        ("StartTimer", "t1"),
    ]
    assert first.decisions[0].attributes["input"] == {"order": 7}
    assert decide(decider, golden().events, 10).decisions == []
    last = decide(decider, golden().events)
    assert [d.kind for d in last.decisions] == ["RecordMarker", "CompleteWorkflow"]
    assert last.decisions[1].attributes == {"result": {"size": 3}}


# -- replay ------------------------------------------------------------------------------


@pytest.mark.parametrize("decider", [Order(), AsyncOrder()], ids=["sync", "async"])
def test_replay_of_a_deterministic_decider_checks_every_completed_task(decider: Order) -> None:
    assert replay(decider, golden().events) == 3


def test_replay_skips_an_open_task_and_counts_none_without_completions() -> None:
    assert replay(Order(), golden().decision_task().events) == 3
    assert replay(Order(), HistoryBuilder().started({"order": 7}).decision_task().events) == 0


def test_replay_accepts_the_failed_events_of_decisions() -> None:
    class Twice(Decider):
        def decide(self, task: DecisionTask) -> None:
            task.schedule_activity("a", "resize")
            task.schedule_activity("a", "resize")
            task.complete()

    b = HistoryBuilder().started().decision_task().decision_completed()
    b.activity_scheduled("a", "resize")
    b.add(
        "ActivityScheduleFailed",
        activity_id="a",
        activity_type={"name": "resize"},
        cause="DUPLICATE_ACTIVITY_ID",
        decider_completed_event_id=4,
    )
    b.add("WorkflowCloseFailed", decision_type="CompleteWorkflow", decider_completed_event_id=4)
    assert replay(Twice(), b.events) == 1


AT4 = "decision task completed at event 4: "
AT15 = "decision task completed at event 15: "
NONDETERMINISTIC = [
    ("activity-id", AT4 + "decision 1 (ScheduleActivity) names 'b'; the history records 'a'"),
    ("timer-id", AT4 + "decision 2 (StartTimer) names 't2'; the history records 't1'"),
    ("input", AT4 + "activity 'a' is scheduled with a different type or input than the history"),
    ("activity-type", AT4 + "activity 'a' is scheduled with a different type or input"),
    (
        "extra",
        AT4 + "the decider made 3 decisions (ScheduleActivity, StartTimer, RecordMarker); "
        "the history records 2 (ActivityScheduled, TimerScheduled)",
    ),
    (
        "missing",
        AT4 + "the decider made 1 decisions (ScheduleActivity); "
        "the history records 2 (ActivityScheduled, TimerScheduled)",
    ),
    ("timer-first", AT4 + "decision 1 is StartTimer; the history records ActivityScheduled"),
    ("kind", AT15 + "decision 2 is FailWorkflow; the history records WorkflowSuccess"),
    (
        "marker-name",
        AT15 + "decision 1 (RecordMarker) names 'finished'; the history records 'done'",
    ),
]


@pytest.mark.parametrize(
    ("variant", "message"), NONDETERMINISTIC, ids=[v for v, _ in NONDETERMINISTIC]
)
def test_replay_names_the_first_difference(variant: str, message: str) -> None:
    with pytest.raises(NonDeterminismError) as caught:
        replay(Order(variant), golden().events)
    assert str(caught.value).startswith(message)


def test_replay_with_no_decision_recorded_but_one_made() -> None:
    b = golden()
    b.events[:] = [e for e in b.events if e.type != "WorkflowSuccess"]
    with pytest.raises(NonDeterminismError, match=r"made 2 decisions .*records 1 \(Marker\)"):
        replay(Order(), b.events)


# -- events as JSON ------------------------------------------------------------------------


def test_event_to_json_shape() -> None:
    event = golden().events[4]
    assert event.to_json() == {
        "event_id": 5,
        "type": "ActivityScheduled",
        "timestamp": "2026-01-01T00:00:04.000000Z",
        "attributes": {
            "activity_id": "a",
            "activity_type": {"name": "resize"},
            "input": {"order": 7},
            "task_list": "default",
            "start_to_close_timeout": 300.0,
            "decider_completed_event_id": 4,
        },
    }


@pytest.mark.parametrize(
    "wrap", [lambda items: items, lambda items: {"events": items}], ids=["list", "doc"]
)
def test_events_json_round_trip(wrap: Any) -> None:
    events = golden().events
    doc = json.loads(json.dumps(wrap([e.to_json() for e in events])))
    again = events_from_json(doc)
    assert again == events
    assert again[0].timestamp == EPOCH and again[0].timestamp.tzinfo is not None


@pytest.mark.parametrize(
    "stamp",
    ["2026-01-01T00:00:04Z", "2026-01-01T00:00:04+00:00", "2026-01-01T01:00:04+01:00"],
)
def test_event_from_json_timestamps(stamp: str) -> None:
    (event,) = events_from_json([{"event_id": "3", "type": "Signal", "timestamp": stamp}])
    assert event == Event(3, "Signal", datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC), {})
    assert event.get("signal_name", "none") == "none"


def test_golden_file_matches_the_builder_and_replays() -> None:
    doc = json.loads((GOLDEN / "order_history.json").read_text())
    events = events_from_json(doc)
    assert events == golden().events
    assert replay(Order(), events) == 3
    with pytest.raises(NonDeterminismError, match="event 4"):
        replay(Order("input"), events)

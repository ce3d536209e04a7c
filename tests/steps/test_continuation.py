"""Step workflows that continue as new on their own (`workers/steps/continuation.py`),
on a real in-process server whose history limit is set low: the loop goes on in
new runs with its variables, replay points and signals, each run's history
replays to the same decisions, and `continue-as-new-after` is read and checked."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

from orchestrator.config import ServerConfig
from orchestrator.engine.limits import Limits
from sdk import AsyncClient, Decision, Event
from sdk.converter import DEFAULT_CONVERTER
from sdk.testing import HistoryBuilder
from tests.helpers import wait_until
from tests.steps.harness import run_steps
from workers.steps.continuation import ContinueAfter, parse_after
from workers.steps.definition import DefinitionError, parse
from workers.steps.interpreter import check_history, replay

LIMIT = 200


@pytest.fixture
def server_config(db_url: str) -> ServerConfig:
    return ServerConfig(
        db_url=db_url,
        listen="127.0.0.1:0",
        long_poll=3.0,
        drain_grace=1.0,
        limits=Limits(events_per_run=LIMIT),
    )


LOOP = """\
{settings}
steps:
  - let integer count = 0
  - let integer total = 0
  - step: let phase = looping
    replayable: from here
  - id: wait
    step: wait signal tick
  - let integer total = ${{total}} + ${{output.n}}
  - let integer count = ${{count}} + 1
  - step: return
    value: {{count: "${{count}}", total: "${{total}}", phase: "${{phase}}"}}
    condition: {{target: "${{output.stop}}", equals: true}}
  - goto wait
"""


async def runs_of(client: AsyncClient, workflow_id: str) -> list[list[Event]]:
    """Every run of the workflow, oldest first, each with its history."""
    runs: list[list[Event]] = []
    run_id = ""
    history = await client.history(workflow_id)
    while True:
        runs.insert(0, history)
        run_id = str(history[0].get("continued_from_run_id") or "")
        if not run_id:
            return runs
        history = await client.history(workflow_id, run_id=run_id)


def ticks(count: int, pause_after: int = 0, stop_last: bool = True) -> Any:
    """Send `count` ticks, the last one saying stop (unless not `stop_last`), each
    once the loop took the one before (a burst would fill the history with
    signals alone); with `pause_after`, wait a little over a second after that tick."""

    async def send(client: AsyncClient, workflow_id: str) -> None:
        for n in range(1, count + 1):
            stop = stop_last and n == count
            await client.signal(workflow_id, "tick", {"n": n, "stop": stop})
            if n < count:
                await wait_until(lambda n=n: _consumed(client, workflow_id, n), timeout=20)
            if n == pause_after:
                await asyncio.sleep(1.2)  # time passing is what this test is about

    return send


async def _consumed(client: AsyncClient, workflow_id: str, n: int) -> bool:
    """Whether the loop is waiting for tick n + 1: a `wait` step started once more
    than n times, over all the runs."""
    waits = 0
    for history in await runs_of(client, workflow_id):
        waits += sum(
            1
            for e in history
            if e.type == "Marker"
            and e.get("marker_name") == "step"
            and (e.get("details") or {}).get("type") == "wait"
        )
    return waits > n


async def test_a_signal_loop_outlives_three_history_limits(client: AsyncClient) -> None:
    count = 90  # about eight events a tick: well over three times the limit
    out = await run_steps(client, LOOP.format(settings=""), during=ticks(count))
    assert out.result == {"count": count, "total": count * (count + 1) // 2, "phase": "looping"}
    runs = await runs_of(client, out.workflow_id)
    assert len(runs) >= 4
    assert sum(len(h) for h in runs) > 3 * LIMIT
    definition = parse(str(runs[0][0].get("definition")), "<snapshot>")
    counts: list[int] = []
    for i, history in enumerate(runs):
        assert len(history) <= LIMIT
        if i < len(runs) - 1:
            assert history[-1].type == "WorkflowContinuedAsNew"
            carried = history[-1].get("input")["$continuation"]
            assert carried["count"] == i + 1
            # It parks at the start of one of the loop's steps, with what it has so far.
            assert 3 <= carried["index"] <= 7
            assert carried["marks"] == [2]
            assert carried["variables"]["phase"] == "looping"
            counts.append(carried["variables"]["count"])
        check_history(definition, history, "", out.workflow_id)
    assert counts == sorted(counts) and 0 < counts[0] < counts[-1] < count


async def test_the_time_setting_continues_the_run(client: AsyncClient) -> None:
    out = await run_steps(
        client, LOOP.format(settings="continue-as-new-after: 1s"), during=ticks(6, pause_after=3)
    )
    assert out.result == {"count": 6, "total": 21, "phase": "looping"}
    runs = await runs_of(client, out.workflow_id)
    # Ticks 1-3 in the first run. Tick 4 comes after the second is over: the
    # wait takes it, and the run continues before the step after the wait,
    # handing the new run the tick as the previous step's output.
    assert len(runs) == 2
    assert runs[0][-1].type == "WorkflowContinuedAsNew"
    carried = runs[0][-1].get("input")["$continuation"]
    assert carried["variables"] == {"count": 3, "total": 6, "phase": "looping"}
    assert (carried["index"], carried["previous_output"]) == (4, {"n": 4, "stop": False})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1h", ContinueAfter(time=timedelta(hours=1))),
        ("5000 events", ContinueAfter(events=5000)),
        ("30m or 200 events", ContinueAfter(time=timedelta(minutes=30), events=200)),
        ("1000 events or 2h", ContinueAfter(time=timedelta(hours=2), events=1000)),
    ],
)
def test_continue_as_new_after_is_read(text: str, expected: ContinueAfter) -> None:
    assert parse_after(text) == expected
    definition = parse(f"name: x\ncontinue-as-new-after: {text}\nsteps:\n  - log hi\n")
    assert definition.continue_as_new_after == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("soon", "'soon' is neither a duration nor `N events`"),
        ("5 events", "at least 100 events, not 5"),
        ("0s", "the duration must be positive"),
        ("1h or 2h", "the duration is given twice"),
        ("100 events or 200 events", "the event count is given twice"),
        ("1h or 100 events or 2h", "give a duration"),
        ("[1h]", "must be text, not a list"),
        ('""', "give a duration"),
    ],
)
def test_bad_continue_as_new_after_is_refused_with_its_line(text: str, reason: str) -> None:
    source = f"name: x\nsteps:\n  - log hi\ncontinue-as-new-after: {text}\n"
    with pytest.raises(DefinitionError) as err:
        parse(source, "loop.yaml")
    message = str(err.value)
    assert message.startswith("loop.yaml:4:"), message
    assert reason in message, message


# -- the interpreter on histories built by hand ------------------------------------------


def _recorded(builder: HistoryBuilder, decisions: list[Decision]) -> None:
    """Append what the service records for `decisions` (a ContinueAsNew refused
    for a signal that came in meanwhile)."""
    builder.decision_completed()
    done = builder.last_id
    for decision in decisions:
        if decision.kind == "RecordMarker":
            details = json.loads(DEFAULT_CONVERTER.encode(decision.attributes["details"]).data)
            builder.add(
                "Marker",
                marker_name=decision.attributes["marker_name"],
                details=details,
                decider_completed_event_id=done,
            )
        elif decision.kind == "ScheduleActivity":
            a = decision.attributes
            builder.add(
                "ActivityScheduled",
                activity_id=a["activity_id"],
                activity_type={"name": a["activity_type"]},
                input=json.loads(DEFAULT_CONVERTER.encode(a["input"]).data),
                decider_completed_event_id=done,
            )
        elif decision.kind == "StartTimer":
            builder.add(
                "TimerScheduled",
                timer_id=decision.attributes["timer_id"],
                start_to_fire_timeout=decision.attributes["delay"].total_seconds(),
                decider_completed_event_id=done,
            )
        elif decision.kind == "RequestCancelActivity":
            builder.add(
                "ActivityCancelRequested",
                activity_id=decision.attributes["activity_id"],
                decider_completed_event_id=done,
            )
        else:
            assert decision.kind == "ContinueAsNew"
            builder.add(
                "WorkflowCloseFailed",
                decision_type="ContinueAsNew",
                cause="UNHANDLED_EVENTS",
                decider_completed_event_id=done,
            )


def _step_markers(decisions: list[Decision]) -> list[dict[str, Any]]:
    return [
        d.attributes["details"]
        for d in decisions
        if d.kind == "RecordMarker" and d.attributes["marker_name"] == "step"
    ]


def test_a_refused_continuation_is_tried_again_and_keeps_the_signal() -> None:
    definition = parse("name: loop\n" + LOOP.format(settings=""), "loop.yaml")
    old = HistoryBuilder().started({}, workflow_type="loop").decision_task()
    first = replay(definition, old.events, old.last_id)
    assert [m["index"] for m in _step_markers(first)] == [0, 1, 2, 3]  # waiting for a tick
    _recorded(old, first)

    old.signal("tick", {"n": 1, "stop": False}).decision_task()
    second = replay(definition, old.events, old.last_id, continue_suggested=True)
    # The wait took tick 1; the run continues at the next step's start.
    assert [d.kind for d in second] == ["ContinueAsNew"]
    old.signal("tick", {"n": 2, "stop": False})  # after the task started
    _recorded(old, second)

    old.decision_task()
    # Not suggested this time: the workflow stays parked, and continues again
    # (replaying the refused task decides as it did, or this raises).
    third = replay(definition, old.events, old.last_id)
    assert [d.kind for d in third] == ["ContinueAsNew"]
    doc = third[0].attributes["input"]["$continuation"]
    assert (doc["index"], doc["previous_output"]) == (4, {"n": 1, "stop": False})
    assert doc["variables"] == {"count": 0, "total": 0, "phase": "looping"}
    assert doc["signals"] == {"tick": [{"n": 2, "stop": False}]}
    assert (doc["marks"], doc["count"]) == ([2], 1)
    check_history(definition, old.events)

    carried = json.loads(DEFAULT_CONVERTER.encode(third[0].attributes["input"]).data)
    new = (
        HistoryBuilder()
        .started(carried, workflow_type="loop", continued_from_run_id="run-1")
        .decision_task()
    )
    went_on = replay(definition, new.events, new.last_id)
    markers = _step_markers(went_on)
    # Tick 1 is counted, tick 2 (kept for this run) is taken at once, then it waits.
    assert [m["index"] for m in markers] == [4, 5, 7, 3, 4, 5, 7, 3]
    assert markers[-1]["variables"] == {"count": 2, "total": 3, "phase": "looping"}
    assert "retention" not in [d.attributes.get("marker_name") for d in went_on]


def test_nothing_continues_while_something_is_outstanding() -> None:
    text = """\
name: busy
steps:
  - let integer i = 0
  - id: again
    step: activity slow
    timeout: 1m
    on-error:
      - let integer i = ${i} + 1
  - goto again
"""
    definition = parse(text, "busy.yaml")
    b = HistoryBuilder().started({}, workflow_type="busy").decision_task()
    first = replay(definition, b.events, b.last_id)
    assert [d.kind for d in first] == [
        "RecordMarker",
        "RecordMarker",
        "StartTimer",
        "ScheduleActivity",
    ]
    _recorded(b, first)
    timer = first[2].attributes["timer_id"]
    b.add("TimerExpired", timer_id=timer).decision_task()
    # Due, but the timed-out activity's cancel is not through yet when the next
    # steps start: the run goes on instead of leaving it behind.
    second = replay(definition, b.events, b.last_id, continue_suggested=True)
    kinds = [d.kind for d in second]
    assert "ContinueAsNew" not in kinds
    assert kinds[:2] == ["RequestCancelActivity", "RecordMarker"]
    _recorded(b, second)
    cancel_scheduled = next(e for e in b.events if e.type == "ActivityScheduled").event_id
    b.add("ActivityCanceled", scheduled_event_id=cancel_scheduled)
    again = next(d for d in reversed(second) if d.kind == "StartTimer")
    b.add("TimerExpired", timer_id=again.attributes["timer_id"]).decision_task()
    # Now the first is over; the second times out too, and with its cancel
    # pending the run still does not continue.
    third = replay(definition, b.events, b.last_id, continue_suggested=True)
    assert "ContinueAsNew" not in [d.kind for d in third]


def test_the_new_run_has_what_was_left_of_the_workflow_timeout() -> None:
    text = """\
name: timed
timeout: 1h
steps:
  - let integer i = 0
  - id: w
    step: wait signal tick
  - let integer i = ${i} + 1
  - goto w
"""
    definition = parse(text, "timed.yaml")
    old = HistoryBuilder().started({}, workflow_type="timed").decision_task()
    first = replay(definition, old.events, old.last_id)
    timer = next(d for d in first if d.kind == "StartTimer")
    assert timer.attributes["delay"] == timedelta(hours=1)
    _recorded(old, first)
    old.signal("tick", 1).decision_task()
    second = replay(definition, old.events, old.last_id, continue_suggested=True)
    assert [d.kind for d in second] == ["ContinueAsNew"]  # the timeout timer is no obstacle
    carried = json.loads(DEFAULT_CONVERTER.encode(second[0].attributes["input"]).data)
    later = old.events[2].timestamp + timedelta(minutes=10)
    new = (
        HistoryBuilder(start=later)
        .started(carried, workflow_type="timed", continued_from_run_id="run-1")
        .decision_task()
    )
    went_on = replay(definition, new.events, new.last_id)
    left = next(d for d in went_on if d.kind == "StartTimer")
    # Ten minutes (and the two seconds the builder puts before its DeciderStarted) gone.
    assert left.attributes["delay"] == timedelta(minutes=50, seconds=-2)


def test_an_operator_replay_of_a_continued_run_goes_where_it_says() -> None:
    definition = parse("name: loop\n" + LOOP.format(settings=""), "loop.yaml")
    doc = {"index": 4, "input": {"team": "a"}, "variables": {"count": 9}, "marks": [2]}
    replayed = HistoryBuilder().add(
        "WorkflowStarted",
        workflow_type={"name": "loop"},
        input={"$continuation": doc},
        replay_of_run_id="run-3",
    )
    point = {"index": 3, "resume": False, "variables": {"count": 1, "total": 1, "phase": "p"}}
    replayed.add("ReplayRequested", point=point).decision_task()
    decisions = replay(definition, replayed.events, replayed.last_id)
    markers = _step_markers(decisions)
    assert [m["index"] for m in markers] == [3]  # the wait, with the point's variables
    assert markers[0]["variables"] == point["variables"]

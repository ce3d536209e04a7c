"""Step workflows that continue as new on their own (`workers/steps/continuation.py`),
on a real in-process server whose history limit is set low: the loop goes on in
new runs with its variables, replay points and signals, each run's history
replays to the same decisions, and `continue-as-new-after` is read and checked."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from orchestrator.config import ServerConfig
from orchestrator.engine.limits import Limits
from sdk import AsyncClient, Event
from tests.helpers import wait_until
from tests.steps.harness import run_steps
from workers.steps.continuation import ContinueAfter, parse_after
from workers.steps.definition import DefinitionError, parse
from workers.steps.interpreter import check_history

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


def ticks(count: int, pause_after: int = 0) -> Any:
    """Send `count` ticks, the last one saying stop, each once the loop took the
    one before (a burst would fill the history with signals alone); with
    `pause_after`, wait a little over a second after that tick."""

    async def send(client: AsyncClient, workflow_id: str) -> None:
        for n in range(1, count + 1):
            await client.signal(workflow_id, "tick", {"n": n, "stop": n == count})
            if n < count:
                await wait_until(lambda: _consumed(client, workflow_id, n), timeout=20)
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

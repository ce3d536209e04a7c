"""A step workflow's steps as the UI shows them (webui/steps_view.py), from the
histories of real runs on an in-process server (one that completes, one that
fails at a step, one waiting on a signal, one replayed in place, one whose
error a workflow-level handler takes), and from hand-made histories for the
runs that continue others (continue-as-new, the replay of a closed run)."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.server import Server
from sdk import AsyncClient, Event
from tests.helpers import wait_until
from tests.steps.activities import echo, explode
from tests.steps.harness import definition_text, run_steps, wait_for_marker
from tests.steps.test_operator_replay import operator_replay
from webui.steps_view import StepView, place_of, step_view


@pytest.fixture(params=["sqlite"])
def db_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def client(server: Server) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(f"127.0.0.1:{server.port}", identity="ui-test") as c:
        yield c


def view_of(history: list[Event], selected: str | None = None) -> StepView:
    view = step_view(str(history[0].get("definition")), history, selected=selected)
    assert view is not None
    return view


def states(view: StepView) -> list[tuple[int, str, str]]:
    return [(s.depth, s.label, s.state) for s in view.steps]


async def test_a_completed_run(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let a = 1
          - id: call
            step: activity echo
            input: {value: "${a}"}
            replayable: from here
          - step: if ${a} == 1
            then:
              - let b = 2
            else:
              - log never
          - foreach n in 1..2 do log item ${n}
          - sleep 10ms
          - return ${b}
        """,
        activities=[echo],
    )
    assert out.result == 2
    view = view_of(out.history)
    assert states(view) == [
        (0, "let a = 1", "done"),
        (0, "activity echo", "done"),
        (0, "if ${a} == 1", "done"),
        (1, "then: let b = 2", "done"),
        (1, "else: log never", "not-reached"),
        (0, "foreach n in 1..2", "done"),
        (1, "log item ${n}", "done"),
        (0, "sleep 10ms", "done"),
        (0, "return ${b}", "done"),
    ]
    assert [s.id for s in view.steps] == ["0", "call", "2", "2.t/0", "2.e/0", "3", "3/0", "4", "5"]
    assert view.steps[6].visits == 2  # once per item
    markers = [e.event_id for e in out.history if e.type == "Marker"]
    assert view.steps[1].entered_event_id in markers
    assert view.steps[4].entered_event_id is None
    # Variables: at the latest step by default, at entry to the chosen one otherwise.
    assert view.selected is None
    assert view.variables == {"a": 1, "b": 2}
    assert view.variables_step is not None and view.variables_step.label == "return ${b}"
    chosen = view_of(out.history, selected="call")
    assert chosen.selected is not None and chosen.selected.label == "activity echo"
    assert chosen.variables == {"a": 1}
    assert chosen.input == {"value": 1}
    [point] = view.replay_points
    assert (point.step_id, point.kind) == ("call", "from here")
    assert point.event_id == view.steps[1].entered_event_id
    assert "activity echo" in view.yaml


async def test_a_run_that_fails_at_a_step(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let a = 1
          - id: charge
            step: activity explode
            input: {message: declined}
          - log never
        """,
        activities=[explode],
    )
    assert out.failed
    assert [s.state for s in view_of(out.history).steps] == ["done", "failed", "not-reached"]
    assert view_of(out.history).variables == {"a": 1}

    nested = await run_steps(
        client,
        """
        steps:
          - let a = 1
          - step: if ${a} == 1
            then:
              - log about to fail
              - fail message no
          - log never
        """,
    )
    assert nested.failed
    assert states(view_of(nested.history)) == [
        (0, "let a = 1", "done"),
        (0, "if ${a} == 1", "failed"),
        (1, "then: log about to fail", "done"),
        (1, "then: fail message no", "failed"),
        (0, "log never", "not-reached"),
    ]


async def test_a_workflow_level_handler(client: AsyncClient) -> None:
    handled = await run_steps(
        client,
        """
        on-error:
          - let handled = yes
        steps:
          - id: boom
            step: activity explode
          - log never
        """,
        activities=[explode],
    )
    assert not handled.failed
    assert states(view_of(handled.history)) == [
        (0, "activity explode", "done"),
        (0, "log never", "not-reached"),
        (0, "on-error: let handled = yes", "done"),
    ]
    rethrown = await run_steps(
        client,
        """
        on-error:
          - log cleaning up
          - fail rethrow
        steps:
          - id: boom
            step: activity explode
        """,
        activities=[explode],
    )
    assert rethrown.failed
    # The step whose error ended the run is failed, though the handlers ran after it.
    assert [s.state for s in view_of(rethrown.history).steps] == ["failed", "done", "failed"]


async def test_a_run_waiting_on_a_signal_is_running(client: AsyncClient) -> None:
    seen: list[Event] = []

    async def during(c: AsyncClient, workflow_id: str) -> None:
        seen.extend(await wait_for_marker(c, workflow_id, "wait"))
        await c.signal(workflow_id, "approve", {"by": "ann"})

    out = await run_steps(
        client,
        """
        steps:
          - let asked = yes
          - wait signal approve timeout 1m
          - return ${output.by}
        """,
        during=during,
    )
    assert out.result == "ann"
    open_view = view_of(seen)
    assert [(s.label, s.state) for s in open_view.steps] == [
        ("let asked = yes", "done"),
        ("wait signal approve timeout 1m", "running"),
        ("return ${output.by}", "not-reached"),
    ]
    assert open_view.variables == {"asked": "yes"}
    assert [s.state for s in view_of(out.history).steps] == ["done", "done", "done"]


async def test_a_replay_in_place(client: AsyncClient) -> None:
    seen: list[Event] = []

    async def waits(c: AsyncClient, workflow_id: str) -> list[Event]:
        events = await c.history(workflow_id)
        started = [
            e for e in events if e.type == "Marker" and e.get("details", {}).get("type") == "wait"
        ]
        return events if len(started) == 2 else []

    async def during(c: AsyncClient, workflow_id: str) -> None:
        await wait_for_marker(c, workflow_id, "wait")
        await operator_replay(c, workflow_id, "from", "bump")
        seen.extend(await wait_until(lambda: waits(c, workflow_id), timeout=15))
        await c.signal(workflow_id, "go")

    out = await run_steps(
        client,
        """
        steps:
          - let x = 1
          - id: bump
            step: let x = ${x} + 1
            replayable: from here
          - wait signal go
          - return ${x}
        """,
        during=during,
    )
    assert out.result == 2  # x as at the replay point, bumped once more
    [request] = [e for e in seen if e.type == "ReplayRequested"]
    view = view_of(seen)
    assert [s.state for s in view.steps] == ["done", "done", "running", "not-reached"]
    first, bump, wait, _ = view.steps
    # The steps from the point on are the new path's; those before it, the first's.
    assert first.entered_event_id is not None and first.entered_event_id < request.event_id
    assert bump.entered_event_id is not None and bump.entered_event_id > request.event_id
    assert wait.entered_event_id is not None and wait.entered_event_id > request.event_id
    assert (bump.visits, wait.visits) == (1, 1)
    assert view.variables == {"x": 2}
    [point] = view.replay_points
    assert (point.step_id, point.kind) == ("bump", "from here")
    assert [s.state for s in view_of(out.history).steps] == ["done"] * 4


# -- runs that continue others (hand-made) ---------------------------------------------

DEFINITION = definition_text(
    """
    replayable: from start
    steps:
      - let a = 1
      - step: let b = 2
        replayable: from here
      - sleep 1h
      - return ${b}
    """,
    "carry",
    "ui",
)
T0 = datetime(2025, 3, 1, tzinfo=UTC)


def history(*events: tuple[str, dict[str, Any]]) -> list[Event]:
    return [
        Event(i, kind, T0 + timedelta(seconds=i), attributes)
        for i, (kind, attributes) in enumerate(events, start=1)
    ]


def marker(key: str, index: int, **more: Any) -> tuple[str, dict[str, Any]]:
    details = {"key": key, "index": index, "type": "x", "input": {}, **more}
    return "Marker", {"marker_name": "step", "details": details}


def test_a_run_continued_as_new() -> None:
    carried = {"$continuation": {"index": 2, "marks": [-1, 1], "variables": {"a": 1, "b": 2}}}
    events = history(
        (
            "WorkflowStarted",
            {"definition": DEFINITION, "input": carried, "continued_from_run_id": "x"},
        ),
        marker("2.1", 2, type="sleep", variables={"a": 1, "b": 2}),
    )
    view = step_view(DEFINITION, events)
    assert view is not None
    assert [(s.state, s.entered_event_id) for s in view.steps] == [
        ("done", None),
        ("done", None),
        ("running", 2),
        ("not-reached", None),
    ]
    assert [(p.step_id, p.kind) for p in view.replay_points] == [("start", "kept"), ("1", "kept")]
    assert view.variables == {"a": 1, "b": 2}


def test_the_replay_of_a_closed_run() -> None:
    point = {"index": 1, "resume": False, "marked": True, "variables": {"a": 1}}
    events = history(
        ("WorkflowStarted", {"definition": DEFINITION, "replay_of_run_id": "old"}),
        ("ReplayRequested", {"mode": "from", "step": "1", "point": point}),
        marker("r2/1.1", 1, replayable="from here", variables={"a": 1}),
        marker("r2/2.1", 2, variables={"a": 1, "b": 2}),
        ("WorkflowTerminated", {"reason": "enough"}),
    )
    view = step_view(DEFINITION, events)
    assert view is not None
    assert [s.state for s in view.steps] == ["done", "done", "failed", "not-reached"]
    assert [(p.step_id, p.event_id, p.kind) for p in view.replay_points] == [
        ("start", 2, "from start"),
        ("1", 3, "from here"),
    ]


def test_not_a_step_workflow() -> None:
    events = history(("WorkflowStarted", {}))
    assert step_view("", events) is None
    assert step_view("name: x\nsteps: [{step: nonsense here}]\n", events) is None
    view = step_view(DEFINITION, [])  # a run whose history is not read yet
    assert view is not None and {s.state for s in view.steps} == {"not-reached"}
    assert view.variables == {} and view.variables_step is None


def test_labels_and_places() -> None:
    text = textwrap.dedent(
        """
        name: labels
        steps:
          - wait signal approve
          - step: switch ${x}
            cases:
              - condition: 1
                step: http http://example.invalid/a
              - shell echo hi
          - step: workflow
            lock: quota
            steps:
              - child sub
            on-error:
              - retry limit 2
          - step: activity charge_card
            name: Charge
            on-error:
              - goto end
          - workflow replayable from here
          - signal other go = 1
          - transform y = ${x} | trim
        """
    )
    view = step_view(text, [])
    assert view is not None
    assert [(s.depth, s.id, s.label) for s in view.steps] == [
        (0, "0", "wait signal approve"),
        (0, "1", "switch ${x}"),
        (1, "1.c0/0", "case 1: http http://example.invalid/a"),
        (1, "1.c1/0", "case 2: shell echo hi"),
        (0, "2", "workflow lock quota"),
        (1, "2/0", "child sub"),
        (1, "2/workflow!0", "on-error: retry limit 2"),
        (0, "3", "Charge (activity charge_card)"),
        (1, "3!0", "on-error: goto end"),
        (0, "4", "workflow replayable from here"),
        (0, "5", "signal other go"),
        (0, "6", "transform y = ${x} | trim"),
    ]
    assert view.steps[0].line == 4
    assert place_of("r12/2.1[3]/0.2") == "2/0"
    assert place_of("3.1!0.4") == "3!0"
    assert place_of("1.2.c1/0.1") == "1.c1/0"
    assert place_of("r7/workflow!1.1") == "workflow!1"

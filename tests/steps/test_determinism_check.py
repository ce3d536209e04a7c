"""The replay check of step workflows (`check_history`) compares what each
decision carries, not only its kind and id: a definition that would record a
different `step` marker, wait a different time or end with a different
outcome is refused with `NonDeterminismError`, and so is a history whose
recorded time no longer gives what the run saw (`workflow.util.now`)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from sdk import AsyncClient
from sdk.errors import NonDeterminismError
from tests.steps.harness import FAST, Outcome, definition_text, run_steps
from workers.steps.definition import parse
from workers.steps.interpreter import check_history
from workers.steps.model import Definition


def definition_of(out: Outcome, yaml_text: str) -> Definition:
    """`yaml_text` as a definition of the outcome's workflow type."""
    started = out.history[0].attributes
    return parse(
        definition_text(yaml_text, started["workflow_type"]["name"], started["task_list"]),
        "changed.yaml",
    )


def replay_with(out: Outcome, yaml_text: str) -> None:
    """Replay the outcome's history through another definition of the same type."""
    check_history(
        definition_of(out, yaml_text), out.history, out.run_id, out.workflow_id, min_timer=FAST
    )


async def test_a_different_marker_payload_is_caught(client: AsyncClient) -> None:
    out = await run_steps(client, "steps:\n  - let a = 1\n  - return done\n")
    assert out.result == "done"
    # Same decisions, same ids, same result: only the `return` step's marker
    # records different variables.
    with pytest.raises(NonDeterminismError, match=r"decision 2 \(RecordMarker 'step'\).*variables"):
        replay_with(out, "steps:\n  - let a = 2\n  - return done\n")


async def test_a_different_marker_input_is_caught(client: AsyncClient) -> None:
    out = await run_steps(
        client, "steps:\n  - step: no-op\n    input: {size: small}\n  - return done\n"
    )
    with pytest.raises(NonDeterminismError, match=r"RecordMarker 'step'.*\(input\)"):
        replay_with(out, "steps:\n  - step: no-op\n    input: {size: large}\n  - return done\n")


async def test_a_different_timer_duration_is_caught(client: AsyncClient) -> None:
    out = await run_steps(client, "steps:\n  - sleep 20ms\n  - return done\n")
    assert out.result == "done"
    with pytest.raises(NonDeterminismError, match=r"StartTimer '0\.1:sleep'.*waits 0\.03s"):
        replay_with(out, "steps:\n  - sleep 30ms\n  - return done\n")


async def test_a_different_result_is_caught(client: AsyncClient) -> None:
    out = await run_steps(client, "steps:\n  - return first\n")
    assert out.result == "first"
    with pytest.raises(NonDeterminismError, match=r"CompleteWorkflow.*different result: .second"):
        replay_with(out, "steps:\n  - return second\n")


async def test_a_different_failure_is_caught(client: AsyncClient) -> None:
    out = await run_steps(client, "steps:\n  - fail message one\n")
    assert out.reason == "Fail"
    with pytest.raises(NonDeterminismError, match=r"FailWorkflow.*different details \(message\)"):
        replay_with(out, "steps:\n  - fail message two\n")
    # a history that records another reason for the same failure
    other = [
        dataclasses.replace(e, attributes={**e.attributes, "reason": "Other"})
        if e.type == "WorkflowFailed"
        else e
        for e in out.history
    ]
    with pytest.raises(NonDeterminismError, match=r"FailWorkflow.*different reason"):
        check_history(definition_of(out, "steps:\n  - fail message one\n"), other)


async def test_now_is_the_recorded_decision_time_and_replays_the_same(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let started = ${workflow.util.now}
          - sleep 50ms
          - let later = ${workflow.util.now}
          - type: return
            value: {started: "${started}", later: "${later}"}
        """,
    )
    # `now` is the time of the decision task, as its DeciderStarted records it
    # (the harness has replayed the history: the same values again).
    tasks = [e for e in out.history if e.type == "DeciderStarted"]
    assert out.result["started"] == tasks[0].timestamp.isoformat()
    assert out.result["later"] == tasks[-1].timestamp.isoformat()
    assert out.result["started"] != out.result["later"]
    # the value is in the history: the sleep step's marker carries it
    sleep = next(s for s in out.steps() if s["type"] == "sleep")
    assert sleep["variables"] == {"started": out.result["started"]}

    # A history whose first task happened at another time gives another `now`:
    # the replay sees a different marker and refuses.
    moved = [
        dataclasses.replace(e, timestamp=e.timestamp + timedelta(seconds=1))
        if e.event_id == tasks[0].event_id
        else e
        for e in out.history
    ]
    definition = definition_of(
        out,
        """
        steps:
          - let started = ${workflow.util.now}
          - sleep 50ms
          - let later = ${workflow.util.now}
          - type: return
            value: {started: "${started}", later: "${later}"}
        """,
    )
    check_history(definition, out.history, out.run_id, out.workflow_id, min_timer=FAST)
    with pytest.raises(NonDeterminismError, match=r"RecordMarker 'step'.*\(variables\)"):
        check_history(definition, moved, out.run_id, out.workflow_id, min_timer=FAST)

"""What the history carries for replay, and that replaying it decides the
same: the `step` markers' replay-point changes, and a history refused by a
definition that would decide differently."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sdk import AsyncClient, DeciderWorker, Event
from sdk.errors import NonDeterminismError, WorkflowOutcomeError
from tests.helpers import unique
from tests.steps import activities as acts
from tests.steps.harness import FAST, definition_text, run_steps
from workers.steps.definition import parse
from workers.steps.interpreter import StepDecider, check_history, replay


async def test_markers_record_replay_point_changes(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: let a = 1
            replayable: from here
          - step: let b = 2
            replayable: from here only
          - workflow replayable reset
          - workflow replayable from here
          - step: let c = 3
            replayable: reset
          - return ${a} ${b} ${c}
        """,
    )
    assert out.result == "1 2 3"
    changes = [(s["index"], s.get("replayable")) for s in out.steps()]
    assert changes == [
        (0, "from here"),
        (1, "from here only"),
        (2, "reset"),
        (3, "from here"),
        (4, "reset"),
        (5, None),
    ]
    # each marker carries the variables as at the step's entry
    assert [s["variables"] for s in out.steps()][-1] == {"a": 1, "b": 2, "c": 3}


@pytest.mark.parametrize(("change", "replayed"), [("from here", True), ("from here only", False)])
async def test_from_here_only_makes_earlier_replay_points_unusable(
    client: AsyncClient, change: str, replayed: bool
) -> None:
    out = await run_steps(
        client,
        f"""
        steps:
          - id: first
            step: let a = 1
            replayable: from here
          - step: let b = 2
            replayable: {change}
          - retry replay from first limit 1
        """,
    )
    if replayed:
        # `first` is still a replay point: the retry went back there once,
        # then its limit was reached
        assert out.reason == "RetriesExceeded"
        assert out.step_keys() == ["0.1", "1.1", "2.1", "0.2", "1.2", "2.2"]
    else:
        # `from here only` cleared it: nothing at or before `first` to replay from
        assert out.reason == "ReplayError"
        assert "no replay point" in out.details["message"]
        assert out.step_keys() == ["0.1", "1.1", "2.1"]


async def test_a_failing_non_idempotent_step_replays_from_the_from_here_only_point(
    client: AsyncClient,
) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        steps:
          - let tries = 0
          - step: let early = yes
            replayable: from here
          - step: let tries = ${{tries}} + 1
            replayable: from here only
          - step: activity flaky
            input: {{key: {key}, failures: 2}}
            on-error:
              - retry limit 3
          - return ${{tries}}
        """,
        activities=acts.ALL,
    )
    # each retry went back to step 2 (not to the earlier point at step 1), with
    # the variables as they were there
    assert out.result == 1
    keys = out.step_keys()
    assert keys.count("1.1") == 1 and "1.2" not in keys
    assert [k for k in keys if k.startswith("2.")] == ["2.1", "2.2", "2.3"]
    assert len(out.of("ActivityScheduled")) == 3


@pytest.mark.parametrize(
    "reset", ["{step: let b = 2, replayable: reset}", "workflow replayable reset"]
)
async def test_reset_clears_replay_points_so_a_non_idempotent_step_cannot_resume(
    client: AsyncClient, reset: str
) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        replayable: from start
        steps:
          - step: let a = 1
            replayable: from here
          - {reset}
          - step: activity flaky
            input: {{key: {key}, failures: 1}}
            on-error:
              - retry limit 2
        """,
        activities=acts.ALL,
    )
    # neither the start nor step 0 is a replay point any more, and the activity
    # is not idempotent: the retry is refused instead of running it again
    assert out.reason == "ReplayError"
    assert "no replay point" in out.details["message"]
    assert len(out.of("ActivityScheduled")) == 1


async def test_without_reset_the_same_retry_replays_from_the_replay_point(
    client: AsyncClient,
) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        replayable: from start
        steps:
          - step: let a = 1
            replayable: from here
          - let b = 2
          - step: activity flaky
            input: {{key: {key}, failures: 1}}
            on-error:
              - retry limit 2
          - return ${{output.attempt}}
        """,
        activities=acts.ALL,
    )
    assert out.result == 2
    # the handler's retry (its steps' keys have a `!`) went back to step 0
    steps = [k for k in out.step_keys() if "!" not in k]
    assert steps == ["0.1", "1.1", "2.1", "0.2", "1.2", "2.2", "3.1"]


async def test_a_list_in_place_of_a_step_is_an_inline_block(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let x = 1
          - - let x = ${x} + 1
            - let y = ${x} * 10
          - return ${x} ${y}
        """,
    )
    # an inline block shares its workflow's variables
    assert out.result == "2 20"


async def test_a_history_replayed_by_a_changed_definition_is_refused(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: activity add
            input: {a: 1, b: 2}
          - step: activity add
            input: {a: "${output}", b: 3}
          - return ${output}
        """,
        activities=acts.ALL,
    )
    assert out.result == 6
    started = out.history[0].attributes
    name, task_list = started["workflow_type"]["name"], started["task_list"]
    changed = parse(
        definition_text(
            """
            steps:
              - step: activity echo
                input: {value: 1}
              - return ${output}
            """,
            name,
            task_list,
        ),
        "changed.yaml",
    )
    with pytest.raises(NonDeterminismError, match="decision"):
        check_history(changed, out.history, out.run_id, out.workflow_id)


async def test_every_decision_task_decides_again_what_it_recorded(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: foreach n in 1..3
            concurrency: 2
            do:
              - step: activity add
                input: {a: "${n}", b: 1}
          - sleep 10ms
          - return ${output}
        """,
        activities=acts.ALL,
    )
    assert out.result == [2, 3, 4]
    started = out.history[0].attributes
    definition = parse(
        definition_text(
            """
            steps:
              - step: foreach n in 1..3
                concurrency: 2
                do:
                  - step: activity add
                    input: {a: "${n}", b: 1}
              - sleep 10ms
              - return ${output}
            """,
            started["workflow_type"]["name"],
            started["task_list"],
        ),
        "same.yaml",
    )
    # Re-decide each task from the history as it stood then: the same decisions.
    tasks = [e for e in out.history if e.type == "DeciderStarted"]
    assert len(tasks) >= 3
    for task in tasks:
        upto = [e for e in out.history if e.event_id <= task.event_id]
        decisions = replay(
            definition, upto, task.event_id, out.run_id, out.workflow_id, min_timer=FAST
        )
        recorded = [
            e.type
            for e in out.history
            if e.attributes.get("decider_completed_event_id")
            and _completed_for(out.history, task.event_id)
            == e.attributes["decider_completed_event_id"]
        ]
        made = [d.kind for d in decisions if d.kind not in CLOSE]
        assert [RECORDED[k] for k in made] == [t for t in recorded if t not in CLOSED]


CLOSE = {"CompleteWorkflow", "FailWorkflow", "CancelWorkflow"}
CLOSED = {"WorkflowSuccess", "WorkflowFailed", "WorkflowCanceled"}
RECORDED = {
    "ScheduleActivity": "ActivityScheduled",
    "StartTimer": "TimerScheduled",
    "RecordMarker": "Marker",
    "RequestCancelActivity": "ActivityCancelRequested",
    "CancelTimer": "TimerCanceled",
}


def _completed_for(history: list[Event], started_id: int) -> int | None:
    for event in history:
        if event.type == "DeciderCompleted" and event.attributes.get("started_event_id") == (
            started_id
        ):
            return event.event_id
    return None


async def test_a_snapshot_that_does_not_parse_fails_the_run(client: AsyncClient) -> None:
    # `weft register` parses first; a client that skips it can still store junk.
    name, task_list = unique("junk"), unique("steps")
    await client.register_workflow_type(
        name, version="1", default_task_list=task_list, definition="steps: [unclosed"
    )
    decider = DeciderWorker(client, deciders=[], fallback=StepDecider(), task_lists=[task_list])
    async with decider:
        run = await client.start_workflow(name, {}, version="1")
        with pytest.raises(WorkflowOutcomeError) as failed:
            await client.result(run.workflow_id, timeout=timedelta(seconds=30))
    assert failed.value.reason == "InvalidDefinition"

"""Step types of STEPS.md that run blocks (nested workflows, fan-out, switch,
`if`, `return` in a block) and `log`, on a real server.

Every outcome's history was also replayed through a fresh interpreter by the
harness (`check_history`)."""

from __future__ import annotations

from typing import Any

import pytest

from sdk import AsyncClient
from tests.helpers import unique
from tests.steps import activities as acts
from tests.steps.harness import Outcome, run_steps

# -- nested workflows: their own on-error and timeout; fan-out concurrency -----------------


async def test_nested_workflow_on_error_handles_inside_the_child(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - type: workflow
            on-error:
              - return recovered
            steps:
              - fail message inner
              - return unreachable
          - return after ${output}
        """,
    )
    # the handler is the child's own workflow-level one: its `return` ends
    # the child, and the parent goes on with the child's output
    assert out.result == "after recovered"


async def test_nested_workflow_on_error_applies_to_each_target(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - type: workflow
            target: [1, 2, 3]
            on-error:
              - let output = failed ${target}
            steps:
              - step: fail message bad
                condition: {target: "${target}", equals: 2}
              - let output = ok ${target}
        """,
    )
    assert out.result == ["ok 1", "failed 2", "ok 3"]


async def test_each_target_of_a_nested_workflow_retries_on_its_own(client: AsyncClient) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        steps:
          - type: workflow
            target: [a, b]
            concurrency: all
            on-error:
              - retry limit 1 backoff 10ms
            steps:
              - step: activity flaky
                input: {{key: "{key}-${{target}}", failures: 1}}
                idempotent: yes
              - return ${{output.attempt}}
        """,
        activities=acts.ALL,
    )
    # each child has its own retry count and backoff timer
    assert out.result == [2, 2]
    backoffs = sorted(e.attributes["timer_id"] for e in out.of("TimerScheduled"))
    assert backoffs == ["0.1[0]/workflow!0.1:backoff", "0.1[1]/workflow!0.1:backoff"]


async def test_nested_workflow_timeout_fails_the_step_without_its_on_error(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        on-error:
          - return caught ${workflow.error.type}
        steps:
          - type: workflow
            timeout: 200ms
            on-error:
              - return handled inside
            steps:
              - wait signal never
          - return not reached
        """,
    )
    # as a workflow's own timeout, the child's skips the child's on-error; the
    # parent sees the step fail with Timeout
    assert out.result == "caught Timeout"
    timers = {e.attributes["timer_id"]: e for e in out.of("TimerScheduled")}
    assert timers["0.1/:timeout"].attributes["start_to_fire_timeout"] == 0.2
    assert "TimerExpired" in out.types()


def most_open_at_once(out: Outcome) -> int:
    """The most activities scheduled and not yet finished at any point."""
    open_now, most = 0, 0
    for event in out.history:
        if event.type == "ActivityScheduled":
            open_now += 1
            most = max(most, open_now)
        elif event.type in ("ActivitySuccess", "ActivityFailed", "ActivityTimedOut"):
            open_now -= 1
    return most


async def test_nested_workflow_target_runs_with_numeric_concurrency(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - type: workflow
            target: 1..5
            concurrency: 2
            steps:
              - step: activity slow
                input: {seconds: 0.1, label: "${target}"}
              - return ${target}
        """,
        activities=acts.ALL,
    )
    assert out.result == [1, 2, 3, 4, 5]
    assert len(out.of("ActivityScheduled")) == 5
    assert most_open_at_once(out) == 2


# -- switch, if, return in a block, log, reserved next targets -----------------------------


async def test_switch_default_case_when_no_other_matches(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        input: {color: blue}
        steps:
          - step: switch ${input.color}
            cases:
              - step: return stop
                condition: red
              - return unknown ${input.color}
        """,
    )
    assert out.result == "unknown blue"


async def test_switch_without_a_matching_case_passes_the_output_through(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let output = before
          - step: switch purple
            cases:
              - step: let output = red
                condition: red
              - step: let output = green
                condition: green
          - return ${output}
        """,
    )
    assert out.result == "before"
    # no case started
    assert [s["type"] for s in out.steps()] == ["let", "switch", "return"]


async def test_switch_case_condition_map_tests_the_switch_value(client: AsyncClient) -> None:
    yaml_text = """
        steps:
          - step: switch ${input.n}
            cases:
              - step: return big
                condition: {greater-than: 10}
              - step: return middling
                condition: {in-range: [5, 10]}
              - return small
        """
    assert (await run_steps(client, yaml_text, input={"n": 50})).result == "big"
    assert (await run_steps(client, yaml_text, input={"n": 7})).result == "middling"
    assert (await run_steps(client, yaml_text, input={"n": 2})).result == "small"


@pytest.mark.parametrize(
    ("value", "taken"),
    [
        *[(True, True), (1, True), ("yes", True), ([0], True)],
        *[(False, False), (0, False), ("", False), ([], False)],
    ],
)
async def test_if_without_equals_tests_truthiness(
    client: AsyncClient, value: Any, taken: bool
) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - if ${input.flag} then return taken
          - return not taken
        """,
        input={"flag": value},
    )
    assert out.result == ("taken" if taken else "not taken")


async def test_return_in_an_inline_block_ends_the_blocks_parent(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let a = 1
          - - let a = 2
            - return early ${a}
            - let a = 3
          - return late ${a}
        """,
    )
    assert out.result == "early 2"


async def test_return_in_an_inline_block_of_a_nested_workflow_ends_only_it(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - type: workflow
            steps:
              - - return from the block
              - return not reached
          - return outer got ${output}
        """,
    )
    assert out.result == "outer got from the block"


async def test_log_message_is_recorded_in_its_step_marker(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let output = 7
          - log the value is ${output}
          - return ${output}
        """,
    )
    assert out.result == 7
    logged = [s for s in out.steps() if s["type"] == "log"]
    assert [s["message"] for s in logged] == ["the value is 7"]


async def test_next_start_runs_the_steps_again(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let i = ${workflow.var.i} ?? 0
          - let i = ${i} + 1
          - step: no-op
            next: start
            condition: {target: "${i}", less-than: 3}
          - return ${i}
        """,
    )
    # a plain jump: the variables are kept
    assert out.result == 3
    assert out.step_keys().count("0.3") == 1


async def test_next_last_jumps_to_the_last_replay_point(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let i = 0
          - step: let i = ${i} + 1
            replayable: from here
          - let j = ${i} * 10
          - step: no-op
            next: last
            condition: {target: "${i}", less-than: 3}
          - return ${i} ${j}
        """,
    )
    assert out.result == "3 30"
    assert [s["index"] for s in out.steps()] == [0, 1, 2, 3, 1, 2, 3, 1, 2, 4]


async def test_next_exit_outside_a_handler_is_an_unknown_step(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: let a = 1
            next: exit
          - return unreachable
        """,
    )
    # `exit` only means something in an error handler
    assert out.reason == "StepNotFound"

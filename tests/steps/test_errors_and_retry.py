"""`on-error` at step and workflow level, and `retry` within a run: limits,
backoff sequences (checked on the timers the history records), hashes,
replay points and resuming."""

from __future__ import annotations

import pytest

from sdk import AsyncClient
from tests.helpers import unique
from tests.steps import activities as acts
from tests.steps.harness import Outcome, run_steps


def backoffs(out: Outcome) -> list[float]:
    """The retry waits, in seconds, as the history's timers record them."""
    return [
        e.attributes["start_to_fire_timeout"]
        for e in out.of("TimerScheduled")
        if str(e.attributes["timer_id"]).endswith(":backoff")
    ]


async def test_flaky_activity_retried_with_backoff_until_it_succeeds(client: AsyncClient) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        steps:
          - step: activity flaky
            input: {{key: {key}, failures: 3}}
            idempotent: yes
            on-error:
              - retry limit 5 backoff 100ms
          - return ${{output.attempt}}
        """,
        activities=acts.ALL,
    )
    assert out.result == 4
    assert len(out.of("ActivityFailed")) == 3
    assert backoffs(out) == [0.1, 0.1, 0.1]
    # each retry resumed the same step: new activity ids, same index
    assert [a["activity_id"] for a in out.activities()] == ["0.1", "0.2", "0.3", "0.4"]
    flaky = [s for s in out.steps() if s["type"] == "activity"]
    assert [s.get("resumed", False) for s in flaky] == [False, True, True, True]


async def test_retry_limit_counts_retries_exactly(client: AsyncClient) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        steps:
          - step: activity flaky
            input: {{key: {key}, failures: 100}}
            idempotent: yes
            on-error:
              - retry limit 3
        """,
        activities=acts.ALL,
    )
    # `limit 3` allows three retries: four attempts, then RetriesExceeded
    assert len(out.of("ActivityFailed")) == 4
    assert out.reason == "RetriesExceeded"
    assert out.details["details"]["type"] == "ActivityFailed"


async def test_backoff_sequence_increasing_up_to_a_cap(client: AsyncClient) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        steps:
          - step: activity flaky
            input: {{key: {key}, failures: 100}}
            idempotent: yes
            on-error:
              - retry limit 5 backoff 10ms 20ms increasing 3x up to 200ms
        """,
        activities=acts.ALL,
    )
    # 10ms 20ms then x3 from the last initial value, capped
    assert backoffs(out) == [0.01, 0.02, 0.06, 0.18, 0.2]
    assert out.reason == "RetriesExceeded"


async def test_limit_in_a_window_uses_the_retry_times(client: AsyncClient) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        steps:
          - step: activity flaky
            input: {{key: {key}, failures: 100}}
            idempotent: yes
            on-error:
              - retry limit 2 in 5m
        """,
        activities=acts.ALL,
    )
    assert len(out.of("ActivityFailed")) == 3
    assert out.reason == "RetriesExceeded"


async def test_retries_with_the_same_hash_share_one_count(client: AsyncClient) -> None:
    key1, key2 = unique("flaky"), unique("flaky")
    out = await run_steps(
        client,
        f"""
        steps:
          - step: activity flaky
            input: {{key: {key1}, failures: 1}}
            idempotent: yes
            on-error:
              - type: retry
                limit: [1]
                hash: shared
          - step: activity flaky
            input: {{key: {key2}, failures: 1}}
            idempotent: yes
            on-error:
              - type: retry
                limit: [1]
                hash: shared
        """,
        activities=acts.ALL,
    )
    # the first step used the shared retry; the second has none left
    assert out.reason == "RetriesExceeded"
    assert len(out.of("ActivitySuccess")) == 1


async def test_non_idempotent_step_cannot_resume_without_a_replay_point(
    client: AsyncClient,
) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        steps:
          - step: activity flaky
            input: {{key: {key}, failures: 1}}
            on-error:
              - retry limit 2
        """,
        activities=acts.ALL,
    )
    assert out.reason == "ReplayError"
    assert "not idempotent" in out.details["message"]
    assert len(out.of("ActivityScheduled")) == 1


async def test_non_idempotent_step_replays_from_the_last_replay_point(
    client: AsyncClient,
) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        steps:
          - let tries = 0
          - step: let tries = ${{tries}} + 1
            replayable: from here
          - step: activity flaky
            input: {{key: {key}, failures: 2}}
            on-error:
              - retry limit 3
          - return ${{tries}}
        """,
        activities=acts.ALL,
    )
    # each retry went back to the replay point with the variables as there
    assert out.result == 1
    keys = out.step_keys()
    assert keys.count("1.1") == 1 and "1.3" in keys


async def test_retry_step_outside_a_handler_replays_from_the_replay_point(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        replayable: from start
        steps:
          - let n = ${workflow.var.n} ?? 0
          - let n = ${n} + 1
          - step: retry limit 2
            condition: {target: "${n}", less-than: 5}
          - return ${n}
        """,
    )
    # Each replay went back to the start with the variables as they were there
    # (none), so n is 1 on every pass and the retry never stops by itself.
    assert out.reason == "RetriesExceeded"
    assert out.step_keys() == ["0.1", "1.1", "2.1", "0.2", "1.2", "2.2", "0.3", "1.3", "2.3"]
    first_steps = [s for s in out.steps() if s["index"] == 0]
    assert [s["variables"] for s in first_steps] == [{}, {}, {}]
    retries = [s for s in out.steps() if s["index"] == 2]
    assert [s["variables"] for s in retries] == [{"n": 1}] * 3


async def test_retry_step_replays_from_a_replay_point_after_the_start(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let runs = 0
          - step: let runs = ${runs} + 1
            replayable: from here
          - step: retry limit 2
            condition: {target: "${runs}", less-than: 5}
          - return ${runs}
        """,
    )
    # step 0 ran once; steps 1 and 2 three times, each with runs as at step 1
    assert out.reason == "RetriesExceeded"
    assert out.step_keys() == ["0.1", "1.1", "2.1", "1.2", "2.2", "1.3", "2.3"]
    assert [s["variables"] for s in out.steps() if s["index"] == 1] == [{"runs": 0}] * 3


async def test_retry_from_a_step_without_replay_is_a_goto(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - let count = 0
          - id: again
            step: let count = ${count} + 1
          - step: retry from again limit 10
            condition: {target: "${count}", less-than: 4}
          - return ${count}
        """,
    )
    assert out.result == 4


async def test_handler_conditions_pick_the_handler(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: activity explode
            input: {message: disk full}
            on-error:
              - step: let output = wrong
                condition: {error-type: Timeout}
              - step: let output = matched ${workflow.error.type}
                condition: {target: "${workflow.error.message}", glob: "*disk full*"}
          - return ${output}
        """,
        activities=acts.ALL,
    )
    assert out.result == "matched ActivityFailed"


async def test_no_matching_handler_propagates_the_error(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: fail message original
            on-error:
              - step: let x = 1
                condition: {error-type: Timeout}
        """,
    )
    assert out.reason == "Fail"
    assert out.details["message"] == "original"


async def test_handler_next_jumps(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: fail message first
            on-error:
              - step: let handled = yes
                next: recover
          - return not here
          - id: recover
            step: return recovered ${handled}
        """,
    )
    assert out.result == "recovered yes"


@pytest.mark.parametrize(
    "jump",
    ["{step: let handled = yes, next: recover}", "goto recover"],
)
async def test_a_handler_that_jumps_ends_handling(client: AsyncClient, jump: str) -> None:
    out = await run_steps(
        client,
        f"""
        steps:
          - step: fail message first
            on-error:
              - {jump}
              - let second = ran
          - return not here
          - id: recover
            step: let result = ${{second}} ?? "second handler skipped"
          - return ${{result}}
        """,
    )
    assert out.result == "second handler skipped"
    # only the first handler step started (handler steps' keys have a `!`)
    assert [k for k in out.step_keys() if "!" in k] == ["0.1!0.1"]


async def test_a_handler_that_retries_ends_handling(client: AsyncClient) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        steps:
          - step: activity flaky
            input: {{key: {key}, failures: 1}}
            idempotent: yes
            on-error:
              - retry limit 2
              - let output = {{attempt: fallback}}
          - return ${{output.attempt}}
        """,
        activities=acts.ALL,
    )
    # the retry resumed the step; the fallback handler after it never ran
    assert out.result == 2
    assert [k for k in out.step_keys() if "!" in k] == ["0.1!0.1"]


async def test_next_exit_leaves_the_handler_and_continues_after_the_failed_step(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: fail message broken
            next: after
            on-error:
              - step: let handled = yes
                next: exit
              - let second = ran
          - return skipped by the failed step's next
          - id: after
            step: let result = ${handled} ${second} ?? "no second"
          - return ${result}
        """,
    )
    # `exit` ends handling (the second handler did not run) and the failed
    # step's own `next` applies
    assert out.result == "no second"
    assert [k for k in out.step_keys() if "!" in k] == ["0.1!0.1"]


async def test_fail_rethrow_keeps_the_original_error(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: activity explode
            input: {message: kaput}
            on-error:
              - log handling ${error.message}
              - fail rethrow
        """,
        activities=acts.ALL,
    )
    assert out.reason == "ActivityFailed"
    assert "kaput" in out.details["message"]


async def test_fail_rethrow_outside_a_handler_is_an_error(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: fail rethrow
            on-error:
              - return caught ${error.message}
        """,
    )
    assert out.result == "caught fail rethrow outside an error handler"


async def test_workflow_on_error_ends_the_workflow_successfully(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        on-error:
          - let output = handled ${workflow.error.type}
        steps:
          - fail message broken
          - return unreachable
        """,
    )
    assert out.result == "handled Fail"


@pytest.mark.parametrize(
    "jump",
    ["{step: let recovered = yes, next: after}", "goto after"],
)
async def test_workflow_on_error_that_jumps_continues_the_workflow_there(
    client: AsyncClient, jump: str
) -> None:
    out = await run_steps(
        client,
        f"""
        on-error:
          - {jump}
          - let output = handler did not stop
        steps:
          - let before = 1
          - fail message broken
          - return unreachable
          - id: after
            step: let after = ${{before}} + 1
          - return continued ${{after}}
        """,
    )
    # the workflow went on at `after` (with its variables) instead of ending
    assert out.result == "continued 2"
    assert [s["id"] for s in out.steps() if "id" in s] == ["after"]


async def test_workflow_on_error_retry_resumes_the_failed_step(client: AsyncClient) -> None:
    key = unique("flaky")
    out = await run_steps(
        client,
        f"""
        on-error:
          - retry limit 3 backoff 10ms
        steps:
          - let a = 1
          - step: activity flaky
            input: {{key: {key}, failures: 2}}
            idempotent: yes
          - return ${{output.attempt}}
        """,
        activities=acts.ALL,
    )
    assert out.result == 3


async def test_workflow_timeout_fails_the_run(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        timeout: 300ms
        on-error:
          - return handled
        steps:
          - wait signal never
        """,
    )
    # a workflow timeout skips the workflow's on-error
    assert out.reason == "Timeout"


async def test_an_input_that_does_not_resolve_is_handled_by_the_steps_on_error(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: log hello
            input: {who: "${nobody}"}
            on-error:
              - return ${error.type} in ${error.step}
        """,
    )
    assert out.result == "ExpressionError in step 1"


async def test_steps_that_loop_without_waiting_fail_the_run_instead_of_the_decider(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - id: again
            step: fail message still broken
        on-error:
          - goto again
        """,
    )
    assert out.reason == "StepLimit"
    assert "loop" in out.details["message"]

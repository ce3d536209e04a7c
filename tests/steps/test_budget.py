"""A decision task's budget and the timer floor (issue 15, finding 6): a run
that computes too long in one task fails with `DecisionBudgetExceeded`
instead of holding the decider, and timers shorter than `MIN_TIMER` are
rounded up, so a `sleep 1ms` + `goto` loop runs at most once a second."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sdk import AsyncClient, NonDeterminismError
from tests.steps.harness import FAST, run_steps
from workers.steps.interpreter import StepDecider, check_history
from workers.steps.limits import MIN_TIMER

BUSY = """
steps:
  - step: foreach i in 1..3000
    do:
      - let x = ${i} * 2
      - let y = ${x} + 1
"""


async def test_a_task_past_its_cpu_budget_fails_the_run_with_the_cause(
    client: AsyncClient,
) -> None:
    out = await run_steps(client, BUSY, decider=StepDecider(min_timer=FAST, cpu_budget=0.05))
    assert out.reason == "DecisionBudgetExceeded"
    assert "more than 0.05 s of CPU time" in out.details["message"]
    # One task, one answer: no failed or timed-out decision tasks before it.
    assert not out.of("DeciderTimedOut")
    assert not out.of("DeciderFailed")


async def test_within_the_budget_the_same_steps_complete(client: AsyncClient) -> None:
    out = await run_steps(client, BUSY, decider=StepDecider(min_timer=FAST, cpu_budget=60))
    assert not out.failed, out.details


async def test_short_timers_are_rounded_up_to_the_floor(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - sleep 1ms
          - step: wait signal never
            timeout: 0s
            on-error:
              - return ${error.type}
        """,
        decider=StepDecider(),
    )
    assert out.result == "Timeout"
    fired = [e.attributes["start_to_fire_timeout"] for e in out.of("TimerScheduled")]
    assert fired == [MIN_TIMER.total_seconds()] * 2


async def test_a_run_recorded_before_the_floor_still_replays(client: AsyncClient) -> None:
    """A history with a timer under the floor (recorded by a decider without
    one) replays under the floor: the run goes on instead of failing its
    decision tasks as non-deterministic after an upgrade."""
    out = await run_steps(
        client,
        """
        steps:
          - sleep 100ms
          - return done
        """,
        decider=StepDecider(min_timer=FAST),
    )
    assert out.result == "done"
    assert [e.attributes["start_to_fire_timeout"] for e in out.of("TimerScheduled")] == [0.1]
    definition = StepDecider().definition_for(out.history)
    check_history(definition, out.history, out.run_id, out.workflow_id)  # the default floor
    # Longer than the floor, a different duration is still a different decision.
    doctored = [
        replace(e, attributes={**e.attributes, "start_to_fire_timeout": 5.0})
        if e.type == "TimerScheduled"
        else e
        for e in out.history
    ]
    with pytest.raises(NonDeterminismError):
        check_history(definition, doctored, out.run_id, out.workflow_id)

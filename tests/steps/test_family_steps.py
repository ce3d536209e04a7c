"""The steps that reach beyond the run: `lock:` on a workflow and on a nested
`workflow` step, the `child` and `signal` steps, and `retention` (the policy the
service's purge job reads)."""

from __future__ import annotations

import json
from typing import Any

from sdk import AsyncClient, activity
from tests.steps.harness import run_steps


def positions(out: Any, *types: str) -> dict[str, int]:
    """Event id of the first event of each type."""
    found: dict[str, int] = {}
    for event in out.history:
        if event.type in types and event.type not in found:
            found[event.type] = event.event_id
    return found


def first_step_marker(out: Any) -> int:
    return next(
        e.event_id
        for e in out.history
        if e.type == "Marker" and e.attributes.get("marker_name") == "step"
    )


async def test_a_workflow_lock_is_held_before_the_first_step(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        lock: quota-${input.owner}
        timeout: 1h
        steps:
          - return ${input.owner}
        """,
        input={"owner": "ada"},
    )
    assert out.result == "ada"
    [requested] = out.of("LockRequested")
    assert requested.attributes["lock_name"] == "quota-ada"
    at = positions(out, "LockAcquired", "TimerScheduled")
    # The workflow timeout starts once the lock is held.
    assert at["LockAcquired"] < at["TimerScheduled"] < first_step_marker(out)
    assert not out.of("LockReleased")  # the close released it, with the run
    assert await client.list_locks("quota-ada") == []


async def test_a_nested_workflow_holds_its_lock_for_the_block_and_its_on_error(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - type: workflow
            lock: {name: apt, scope: host-1}
            steps:
              - fail message boom
            on-error:
              - let handled = yes
              - return recovered
          - return ${output}
        """,
    )
    assert out.result == "recovered"
    [acquired] = out.of("LockAcquired")
    [released] = out.of("LockReleased")
    assert acquired.attributes["lock_name"] == "apt:host-1"
    handler = next(s for s in out.steps() if s.get("type") == "let")
    handler_event = next(
        e.event_id
        for e in out.history
        if e.type == "Marker" and (e.attributes.get("details") or {}) == handler
    )
    assert acquired.event_id < handler_event < released.event_id


async def test_a_refused_lock_is_a_step_error(client: AsyncClient) -> None:
    """The block's own on-error runs inside the block, once the lock is held: a
    lock that cannot be had fails the step, for the enclosing handlers."""
    out = await run_steps(
        client,
        """
        lock: same
        steps:
          - type: workflow
            lock: same
            steps:
              - return never
            on-error:
              - return handled inside
        """,
    )
    assert out.reason == "LockFailed"
    assert "holds lock 'same' already" in out.details["message"]


async def test_blocks_of_one_run_take_a_lock_in_turn(client: AsyncClient) -> None:
    """The service knows one holder per run: concurrent blocks of the run that
    want the same lock hand it on inside the run, one at a time."""
    out = await run_steps(
        client,
        """
        steps:
          - step: foreach t in ${input.items}
            concurrency: 3
            do:
              - type: workflow
                lock: shared
                input: {t: "${t}"}
                steps:
                  - sleep 10ms
                  - return ${input.t}
        """,
        input={"items": ["a", "b", "c"]},
    )
    assert out.result == ["a", "b", "c"]
    assert len(out.of("LockRequested")) == 1 and len(out.of("LockReleased")) == 1
    assert not out.of("RequestLockFailed")
    # One sleep at a time: each timer starts after the one before fired.
    timers = [e for e in out.history if e.type in ("TimerScheduled", "TimerExpired")]
    assert [e.type for e in timers] == ["TimerScheduled", "TimerExpired"] * 3


@activity(name="family-echo")
def echo(value: Any) -> Any:
    return value


async def test_a_child_workflow_returns_its_result(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: return ${input.depth}
            condition: {target: "${input.depth}", equals: 2}
          - let next = ${input.depth} + 1
          - step: child ${workflow.name}
            input: {depth: "${next}"}
          - return ${output}
        """,
        input={"depth": 0},
    )
    assert out.result == 2  # through a child and a grandchild
    [started] = out.of("ChildWorkflowStarted")
    [done] = out.of("ChildWorkflowSuccess")
    assert done.attributes["workflow_id"] == started.attributes["workflow_id"]
    child = await client.history(started.attributes["workflow_id"])
    assert child[0].get("parent_workflow_id") == out.workflow_id


async def test_a_failed_child_is_a_step_error(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - step: fail message child says no
            condition: {target: "${input.child}", equals: true}
          - step: child ${workflow.name}
            input: {child: true}
            on-error:
              - return ${error.type} ${error.message}
        """,
        input={"child": False},
    )
    assert out.result.startswith("ChildFailed child ")
    assert "Fail" in out.result


async def test_signal_reaches_a_workflow(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        steps:
          - signal ${workflow.id} ping = 42
          - wait signal ping
          - step: signal nobody-${workflow.id} ping
            on-error:
              - return ${output} ${error.type}
        """,
    )
    assert out.result == "42 SignalFailed"
    assert [e.get("identity") for e in out.of("Signal")] == [f"workflow:{out.workflow_id}"]


async def test_retention_is_recorded_for_the_service(client: AsyncClient) -> None:
    out = await run_steps(
        client,
        """
        retention: max(24h, 5)
        steps:
          - workflow retention hash ${input.group} forever
          - return ok
        """,
        input={"group": "vip"},
    )
    assert out.result == "ok"
    policies = [
        e.attributes["details"]["retention"]
        for e in out.of("Marker")
        if e.attributes.get("marker_name") == "retention"
    ]
    assert policies == ["max(24h, 5)", "hash vip forever"]
    assert not out.of("MarkerFailed")
    assert json.dumps(policies)

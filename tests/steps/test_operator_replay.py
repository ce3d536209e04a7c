"""Operator replays (`weft replay`, STEPS.md "Replay") through the interpreter:
each mode on an open run (in place: the abandoned path's activities and timers
are cancelled) and on a closed run (a new run, with the variables as at the
point), the refusals and `--force`, and `replayable: automatically`."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from sdk import AsyncClient, Event, InvalidArgumentError, activity
from tests.helpers import wait_until
from tests.steps.harness import run_steps, wait_for_marker
from workers.steps.definition import parse
from workers.steps.replay import ReplayRefused, resolve


async def operator_replay(
    client: AsyncClient,
    workflow_id: str,
    mode: str,
    step: str = "",
    force: bool = False,
    run_id: str = "",
) -> tuple[str, bool]:
    """What `weft replay` does: resolve the point from the history, then ask."""
    run = (await client.describe(workflow_id, run_id=run_id)).info
    history = await client.history(workflow_id, run_id=run.run_id)
    definition = parse(str(history[0].get("definition")), "<snapshot>")
    point = resolve(
        definition, history, mode, step, force, workflow_id=workflow_id, run_id=run.run_id
    )
    return await client.request_replay(
        workflow_id,
        mode,
        step=step,
        force=force,
        point=point.to_json(),
        run_id=run.run_id,  # type: ignore[arg-type]
    )


async def refusal(client: AsyncClient, workflow_id: str, mode: str, step: str = "") -> str:
    with pytest.raises(ReplayRefused) as info:
        await operator_replay(client, workflow_id, mode, step)
    return str(info.value)


def step_keys(history: list[Event]) -> list[str]:
    return [
        str(e.attributes["details"]["key"])
        for e in history
        if e.type == "Marker" and e.attributes.get("marker_name") == "step"
    ]


async def test_resuming_an_open_run_reruns_the_current_step(client: AsyncClient) -> None:
    async def during(c: AsyncClient, wid: str) -> None:
        await wait_for_marker(c, wid, "wait")
        assert (await operator_replay(c, wid, "resuming"))[1] is False
        await wait_for_marker(c, wid, "wait")
        await c.signal(wid, "go", 5)

    out = await run_steps(
        client,
        """
        steps:
          - let x = 1
          - wait signal go
          - let x = ${x} + ${output}
          - return ${x}
        """,
        during=during,
    )
    assert out.result == 6
    [request] = out.of("ReplayRequested")
    resumed = [s for s in out.steps() if s.get("resumed")]
    assert [(s["key"], s["variables"]) for s in resumed] == [(f"r{request.event_id}/1.1", {"x": 1})]


async def test_resuming_a_non_idempotent_step_goes_back_to_the_replay_point(
    client: AsyncClient,
) -> None:
    calls = itertools.count(1)
    replayed = asyncio.Event()

    @activity(name="slow-charge")
    async def slow_charge(job: dict[str, Any]) -> int:
        if next(calls) == 1:
            await replayed.wait()  # the first one answers too late: it was abandoned
        return int(job["n"]) * 10

    async def during(c: AsyncClient, wid: str) -> None:
        await wait_for_marker(c, wid, "activity")
        await operator_replay(c, wid, "resuming")
        await wait_until(lambda: _has(c, wid, "ActivityCancelRequested"))
        replayed.set()

    out = await run_steps(
        client,
        """
        steps:
          - let n = 4
          - step: let n = ${n} + 1
            replayable: from here
          - step: activity slow-charge
            input: {n: "${n}"}
          - return ${output}
        """,
        activities=[slow_charge],
        during=during,
    )
    assert out.result == 50  # n = 5 again, not 6: the variables as at the point
    assert out.of("ActivityCancelRequested")  # the abandoned attempt
    keys = step_keys(out.history)
    [request] = out.of("ReplayRequested")
    assert keys[-3:] == [f"r{request.event_id}/{i}.1" for i in (1, 2, 3)]


async def test_refusals_say_why(client: AsyncClient) -> None:
    async def during(c: AsyncClient, wid: str) -> None:
        await wait_for_marker(c, wid, "activity")
        assert "no replay point" in await refusal(c, wid, "resuming")
        assert "no replay point" in await refusal(c, wid, "last")
        assert "no replay point" in await refusal(c, wid, "from_start")
        assert "no step 'nowhere'" in await refusal(c, wid, "from", "nowhere")
        # --force: the step itself, again.
        await operator_replay(c, wid, "resuming", force=True)
        await wait_until(lambda: _started_twice(c, wid))
        asked.set()
        await c.signal(wid, "done")

    holds = itertools.count(1)
    asked = asyncio.Event()

    @activity(name="wait-for-done")
    async def wait_for_done() -> str:
        if next(holds) == 1:
            await asked.wait()  # in flight while the refusals are asked for
        return "ok"

    out = await run_steps(
        client,
        """
        steps:
          - step: activity wait-for-done
          - wait signal done
          - return finished
        """,
        activities=[wait_for_done],
        during=during,
    )
    assert out.result == "finished"


async def _has(client: AsyncClient, wid: str, event_type: str) -> bool:
    return event_type in [e.type for e in await client.history(wid)]


async def _started_twice(client: AsyncClient, wid: str) -> bool:
    history = await client.history(wid)
    return sum(1 for e in history if e.type == "ActivityScheduled") >= 2


async def test_replayable_disabled_refuses_even_forced(client: AsyncClient) -> None:
    async def during(c: AsyncClient, wid: str) -> None:
        await wait_for_marker(c, wid, "wait")
        run = (await c.describe(wid)).info
        history = await c.history(wid)
        definition = parse(str(history[0].get("definition")), "<snapshot>")
        with pytest.raises(ReplayRefused, match="replayable: disabled"):
            resolve(definition, history, "resuming", force=True, run_id=run.run_id)
        await c.signal(wid, "go")

    out = await run_steps(
        client,
        "replayable: disabled\nsteps:\n  - wait signal go\n  - return ok\n",
        during=during,
    )
    assert out.result == "ok"


flaky_calls = itertools.count(1)


@activity(name="flaky-provision")
def flaky_provision(job: dict[str, Any]) -> str:
    if next(flaky_calls) == 1:
        raise RuntimeError("cloud said no")
    return f"vm-{job['size']}"


async def test_a_failed_run_replays_as_a_new_run_from_the_last_point(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        replayable: from start
        steps:
          - let size = small
          - step: let size = big
            replayable: from here
          - step: activity flaky-provision
            input: {size: "${size}"}
          - return ${output}
        """,
        input={},
        activities=[flaky_provision],
    )
    assert out.reason == "ActivityFailed"
    # An activity worker for the new run: run_steps' has stopped.
    from sdk import ActivityWorker

    task_list = str(out.history[0].get("task_list"))
    from sdk import DeciderWorker
    from workers.steps.interpreter import StepDecider

    async with (
        DeciderWorker(client, deciders=[], fallback=StepDecider(), task_lists=[task_list]),
        ActivityWorker(client, activities=[flaky_provision], task_lists=[task_list]),
    ):
        new_run, is_new = await operator_replay(client, out.workflow_id, "last")
        assert is_new and new_run != out.run_id
        assert await client.result(out.workflow_id) == "vm-big"
    old = await client.describe(out.workflow_id, run_id=out.run_id)
    assert old.info.replayed_by_run_id == new_run
    history = await client.history(out.workflow_id, run_id=new_run)
    assert history[0].get("replay_of_run_id") == out.run_id
    # The new run starts at the replay point, with the variables as they were there.
    first_step = next(
        e.attributes["details"]
        for e in history
        if e.type == "Marker" and e.attributes.get("marker_name") == "step"
    )
    assert (first_step["index"], first_step["variables"]) == (1, {"size": "small"})
    assert await client.history(out.workflow_id, run_id=out.run_id) == out.history


timeouts_seen = itertools.count(1)


@activity(name="vanishing-step")
async def vanishing_step(job: dict[str, Any]) -> int:
    if next(timeouts_seen) == 1:
        await asyncio.sleep(3)  # as if its runner died: the 1s start-to-close fires first
    return int(job["n"]) + 1


async def test_replayable_automatically_resumes_a_step_whose_runner_vanished(
    client: AsyncClient,
) -> None:
    out = await run_steps(
        client,
        """
        replayable: automatically
        steps:
          - step: activity vanishing-step
            input: {n: 41}
            idempotent: yes
            start_to_close: 1s
          - return ${output}
        """,
        activities=[vanishing_step],
    )
    assert out.result == 42
    [timed_out] = out.of("ActivityTimedOut")
    assert timed_out.attributes["timeout_type"] == "START_TO_CLOSE"
    assert len(out.of("ActivityScheduled")) == 2
    assert [s.get("resumed", False) for s in out.steps()] == [False, True, False]


async def test_from_a_step_goes_to_the_nearest_replay_point_before_it(
    client: AsyncClient,
) -> None:
    async def during(c: AsyncClient, wid: str) -> None:
        await wait_for_marker(c, wid, "wait")
        assert "no replay point" in await refusal(c, wid, "from", "first")
        await operator_replay(c, wid, "from", "third")  # back to `second`
        await wait_until(lambda: _waits(c, wid, 2))
        await c.signal(wid, "go")

    out = await run_steps(
        client,
        """
        steps:
          - id: first
            step: let x = 1
          - id: second
            step: let x = ${x} + 10
            replayable: from here
          - id: third
            step: let x = ${x} + 100
          - wait signal go
          - return ${x}
        """,
        during=during,
    )
    assert out.result == 111  # from `second` with x as it was there (1): 1 + 10 + 100
    [request] = out.of("ReplayRequested")
    replayed = [s for s in out.steps() if str(s["key"]).startswith(f"r{request.event_id}/")]
    assert [(s["index"], s["variables"]) for s in replayed[:2]] == [(1, {"x": 1}), (2, {"x": 11})]


async def _waits(client: AsyncClient, wid: str, times: int) -> bool:
    markers = [
        e
        for e in await client.history(wid)
        if e.type == "Marker" and (e.attributes.get("details") or {}).get("type") == "wait"
    ]
    return len(markers) >= times


async def test_a_terminated_run_replays_from_the_start(client: AsyncClient) -> None:
    async def during(c: AsyncClient, wid: str) -> None:
        await wait_for_marker(c, wid, "wait")
        await c.terminate(wid, reason="operator")

    out = await run_steps(
        client,
        """
        replayable: from start
        steps:
          - let x = ${input.base} * 2
          - wait signal go
          - return ${x}
        """,
        input={"base": 21},
        during=during,
    )
    assert out.reason == "operator"  # terminated
    from sdk import DeciderWorker
    from workers.steps.interpreter import StepDecider

    task_list = str(out.history[0].get("task_list"))
    async with DeciderWorker(client, deciders=[], fallback=StepDecider(), task_lists=[task_list]):
        _, is_new = await operator_replay(client, out.workflow_id, "from_start")
        assert is_new
        await wait_until(lambda: _waits(client, out.workflow_id, 1))
        await client.signal(out.workflow_id, "go")
        assert await client.result(out.workflow_id) == 42


resumable_calls = itertools.count(1)


@activity(name="fussy-lookup")
def fussy_lookup(job: dict[str, Any]) -> str:
    if next(resumable_calls) == 1:
        raise RuntimeError("lookup service down")
    return f"found {job['key']}"


async def test_a_failed_run_resumes_its_idempotent_step_or_goes_from_a_step(
    client: AsyncClient,
) -> None:
    """Closed runs: --resuming reruns the failed (idempotent) step with its
    recorded input in the new run; --from STEP on a later failed run goes to the
    replay point before STEP."""
    out = await run_steps(
        client,
        """
        steps:
          - let key = k-${input.n}
          - step: activity fussy-lookup
            input: {key: "${key}"}
            idempotent: yes
          - return ${output}
        """,
        input={"n": 7},
        activities=[fussy_lookup],
    )
    assert out.reason == "ActivityFailed"
    from sdk import ActivityWorker, DeciderWorker
    from workers.steps.interpreter import StepDecider

    task_list = str(out.history[0].get("task_list"))
    async with (
        DeciderWorker(client, deciders=[], fallback=StepDecider(), task_lists=[task_list]),
        ActivityWorker(client, activities=[fussy_lookup], task_lists=[task_list]),
    ):
        new_run, is_new = await operator_replay(client, out.workflow_id, "resuming")
        assert is_new
        assert await client.result(out.workflow_id) == "found k-7"
    history = await client.history(out.workflow_id, run_id=new_run)
    first = next(
        e.attributes["details"]
        for e in history
        if e.type == "Marker" and e.attributes.get("marker_name") == "step"
    )
    assert (first["index"], first.get("resumed"), first["input"]) == (1, True, {"key": "k-7"})


async def test_from_a_step_on_a_closed_run(client: AsyncClient) -> None:
    async def during(c: AsyncClient, wid: str) -> None:
        await wait_for_marker(c, wid, "wait")
        await c.cancel(wid)

    out = await run_steps(
        client,
        """
        steps:
          - step: let x = 5
            replayable: from here
          - let y = ${x} * 2
          - id: waiting
            step: wait signal go
          - return ${y}
        """,
        during=during,
    )
    assert out.error is not None  # canceled
    from sdk import DeciderWorker
    from workers.steps.interpreter import StepDecider

    task_list = str(out.history[0].get("task_list"))
    async with DeciderWorker(client, deciders=[], fallback=StepDecider(), task_lists=[task_list]):
        with pytest.raises(ReplayRefused, match="no step 'elsewhere'"):
            await operator_replay(client, out.workflow_id, "from", "elsewhere")
        _, is_new = await operator_replay(client, out.workflow_id, "from", "waiting")
        assert is_new
        await wait_until(lambda: _waits(client, out.workflow_id, 1))
        await client.signal(out.workflow_id, "go")
        assert await client.result(out.workflow_id) == 10


async def test_from_start_on_an_open_run(client: AsyncClient) -> None:
    async def during(c: AsyncClient, wid: str) -> None:
        await wait_for_marker(c, wid, "wait")
        await operator_replay(c, wid, "from_start")
        await wait_until(lambda: _waits(c, wid, 2))
        await c.signal(wid, "go", 1)

    out = await run_steps(
        client,
        """
        replayable: from start
        steps:
          - let x = 1
          - wait signal go
          - return ${x} + ${output}
        """,
        during=during,
    )
    assert out.result == "1 + 1"
    [request] = out.of("ReplayRequested")
    assert out.steps()[-3]["key"] == f"r{request.event_id}/0.1"


async def test_a_replay_without_a_usable_point_fails_the_run_with_the_reason(
    client: AsyncClient,
) -> None:
    async def during(c: AsyncClient, wid: str) -> None:
        await wait_for_marker(c, wid, "wait")
        with pytest.raises(InvalidArgumentError):  # not a point at all: refused
            await c.request_replay(wid, "last", point={"where": "somewhere"})
        await c.request_replay(wid, "last", point={"index": 99, "resume": False})

    out = await run_steps(client, "steps:\n  - wait signal go\n", during=during)
    assert out.reason == "ReplayError"
    assert "names step 99, which is not there" in out.details["message"]


async def test_a_replay_keeps_a_blocks_lock_with_its_holder(client: AsyncClient) -> None:
    async def during(c: AsyncClient, wid: str) -> None:
        await wait_for_marker(c, wid, "wait")
        await operator_replay(c, wid, "resuming")
        await wait_until(lambda: _waits(c, wid, 2))
        await c.signal(wid, "go")

    out = await run_steps(
        client,
        """
        steps:
          - type: workflow
            lock: keep-me
            steps:
              - wait signal go
              - return inside
          - return ${output}
        """,
        during=during,
    )
    assert out.result == "inside"
    # Requested once, held through the replay, released once when the block ended.
    assert len(out.of("LockRequested")) == 1
    [released] = out.of("LockReleased")
    [request] = out.of("ReplayRequested")
    [signal] = out.of("Signal")
    assert request.event_id < signal.event_id < released.event_id

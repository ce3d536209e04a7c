"""One step run can never take a decider down (issue 15, findings 4-6).

A real `weft server` and one real `weft decider` process. Each hostile case
(an overflow, a long int text, JSON nested far too deep, a billion-laughs
definition and a billion-laughs `let yaml`, an expression chained and nested
past the bounds, `foreach` over a billion items, a `sleep 1ms` + `goto` loop,
a task that computes past its CPU budget) starts as its own run; meanwhile a
healthy workflow on the same decider completes in time, each hostile run ends
with a clear cause (or is handled by its `on-error`), and the decider is
still running at the end.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from sdk import AsyncClient, Event
from tests.e2e.test_step_workflows import client, closed_history
from tests.helpers import unique, wait_until
from tests.serverproc import ServerProcess
from tests.workerproc import WorkerProcess, spawn

LAUGHS = "".join(
    f"  {name}: &{name} [{', '.join([f'*{prev}' if prev else 'x'] * 10)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)

HOSTILE: dict[str, tuple[str, Any, str]] = {
    # name: (steps and more, input, what the run's end says)
    "overflow": ("steps:\n  - let x = 5m * 1e300\n", None, "out of range"),
    "digits": ("steps:\n  - let integer x = ${d}\n", {"d": "9" * 5000}, "cannot convert"),
    "deep-json": (
        "steps:\n  - let json x = ${doc}\n",
        {"doc": "[" * 100_000 + "]" * 100_000},
        "nests too deeply",
    ),
    "laughs-definition": (f"input:\n{LAUGHS}steps:\n  - return ${{i}}\n", None, "expands to"),
    "laughs-let-yaml": (
        "steps:\n  - step: let yaml x = ${doc}\n    on-error:\n"
        "      - return handled ${error.message}\n",
        {"doc": LAUGHS.replace("  ", "")},
        "handled",
    ),
    "long-chain": ("steps:\n  - let x = 1" + " + 1" * 3000 + "\n", None, "characters long"),
    "deep-parens": (
        "steps:\n  - let x = 1 + " + "( " * 200 + "1" + " )" * 200 + "\n",
        None,
        "nests more than",
    ),
    "huge-foreach": (
        "steps:\n  - step: foreach i in 0..1000000000\n    do:\n      - log ${i}\n",
        None,
        "cannot iterate over 1000000001 items",
    ),
    "busy": (
        "steps:\n  - let n = 0\n  - id: again\n    step: let n = ${n} + 1\n"
        "  - transform y = ${s} | replace all regex . z\n"
        "  - step: goto again\n    condition: {target: '${n}', less-than: 400}\n",
        {"s": "a" * 200_000},
        "CPU time",
    ),
}
__all__ = ["client"]  # the fixture, shared with the other step end-to-end tests

SLEEPY_LOOP = "steps:\n  - id: top\n    step: sleep 1ms\n  - goto top\n"
HEALTHY = "steps:\n  - let a = 20\n  - sleep 1s\n  - let b = ${a} * 2 + 2\n  - return ${b}\n"


async def start(
    client: AsyncClient, task_list: str, body: str, input: Any = None, prefix: str = "hostile"
) -> str:
    """Register the text as it is (as a client that skips the parser could)
    and start a run of it."""
    name = unique(prefix)
    # The decision task's CPU budget (5 s of CPU) must be what ends a busy run: on
    # a loaded machine 5 s of CPU can take longer than the default 10 s decider
    # timeout in wall time, which would time the task out first.
    await client.register_workflow_type(
        name,
        default_task_list=task_list,
        default_decider_timeout=timedelta(minutes=2),
        definition=f"name: {name}\n{body}",
    )
    run = await client.start_workflow(name, input, task_list=task_list)
    return run.workflow_id


def ending(history: list[Event]) -> str:
    last = history[-1]
    details = last.get("details") or {}
    message = details.get("message", "") if isinstance(details, dict) else ""
    return f"{last.type} {last.get('reason') or ''} {message} {last.get('result') or ''}"


async def test_no_run_takes_the_decider_down(
    node: ServerProcess, client: AsyncClient, workers: list[WorkerProcess], tmp_path: Any
) -> None:
    task_list = unique("hostile")
    decider = spawn(workers, node, tmp_path, "decider", "decider", "--task-list", task_list)
    hostile = {
        key: await start(client, task_list, body, input)
        for key, (body, input, _) in HOSTILE.items()
    }
    looping = await start(client, task_list, SLEEPY_LOOP, prefix="loop")
    began = time.monotonic()
    healthy = await start(client, task_list, HEALTHY, prefix="healthy")
    history = await closed_history(client, healthy)
    took = time.monotonic() - began
    assert history[-1].type == "WorkflowSuccess", ending(history)
    assert history[-1].get("result") == 42
    assert took < 30, f"the healthy run took {took:.1f} s next to the hostile ones"

    for key, workflow_id in hostile.items():
        events = await closed_history(client, workflow_id)
        says = HOSTILE[key][2]
        assert says in ending(events), f"{key}: {ending(events)}"
        if says != "handled":
            assert events[-1].type == "WorkflowFailed", f"{key}: {ending(events)}"
        # Failed once, with its cause: no decision task failed or timed out first.
        kinds = {e.type for e in events}
        assert not kinds & {"DeciderTimedOut", "DeciderFailed"}, f"{key}: {sorted(kinds)}"

    # The sleep 1ms + goto loop waits a second a turn: a few timers, not thousands.
    events = await client.history(looping)
    timers = [e for e in events if e.type == "TimerScheduled"]
    assert all(e.get("start_to_fire_timeout") == 1.0 for e in timers)
    assert len(timers) <= time.monotonic() - began + 3
    await client.terminate(looping, reason="test over")

    assert decider.running, decider.log_tail()

    async def answers() -> bool:
        # And it still decides: a second healthy run completes too.
        again = await start(client, task_list, HEALTHY, prefix="healthy")
        return (await closed_history(client, again))[-1].type == "WorkflowSuccess"

    assert await wait_until(answers, timeout=60)

"""Step workflows end to end: `weft server`, `weft decider --definitions DIR`
and `weft runner` as real processes, the workflow started and signalled with
the `weft` command line, its result and history checked.

One workflow uses `let` arithmetic, an activity, a flaky activity retried by
`on-error: retry limit 5 backoff 100ms`, `wait signal` answered by `weft
signal`, `foreach` with `concurrency: 3`, a step `timeout` that cancels a slow
activity, and `return`. The approval-then-provision example runs as the
README tells it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sdk import AsyncClient, Event
from sdk.events import CLOSE_TYPES
from tests.helpers import unique, wait_until
from tests.serverproc import WEFT, ServerProcess
from tests.workerproc import REPO, WorkerProcess, spawn
from workers.steps.definition import load_file
from workers.steps.interpreter import check_history

ACTIVITIES = str(Path(__file__).with_name("step_activities.py"))

EVERYTHING = """\
name: {name}
task_list: {task_list}
parameters:
  base: {{type: integer, default: 2}}
  dir: {{type: string, required: true}}
steps:
  - let integer total = ${{base}} * 10 + 1
  - step: activity double
    input: {{n: "${{total}}"}}
  - let doubled = ${{output.value}}
  - step: activity flaky
    input: {{key: "${{workflow.id}}", failures: 2, dir: "${{dir}}"}}
    idempotent: yes
    on-error:
      - retry limit 5 backoff 100ms
  - let attempts = ${{output.attempt}}
  - wait signal approve timeout 2m
  - let approver = ${{output.by}}
  - step: foreach n in 1..6
    concurrency: 3
    do:
      - step: activity square
        input: {{n: "${{n}}", dir: "${{dir}}"}}
  - let squares = ${{output}}
  - step: activity slow
    input: {{seconds: 120, dir: "${{dir}}"}}
    timeout: 1s
    on-error:
      - step: let timed_out = ${{error.type}}
        condition: {{error-type: Timeout}}
  - type: return
    value:
      total: ${{total}}
      doubled: ${{doubled}}
      attempts: ${{attempts}}
      approver: ${{approver}}
      squares: ${{squares}}
      timed_out: ${{timed_out}}
"""


@pytest.fixture
async def client(node: ServerProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(node.address) as sdk_client:
        yield sdk_client


def weft(address: str, *args: str) -> str:
    done = subprocess.run(
        [str(WEFT), args[0], "--address", address, *args[1:]],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"weft {' '.join(args)} -> {done.returncode}: {done.stderr}"
    return done.stdout


async def registered(decider: WorkerProcess, name: str) -> bool:
    """The decider registers its definitions' types when it starts."""
    assert decider.running, decider.log_tail()
    return any(
        '"decider.registered"' in line and name in line for line in decider.log().splitlines()
    )


async def run_id_of(client: AsyncClient, workflow_id: str) -> str:
    return (await client.describe(workflow_id)).info.run_id


async def closed_history(client: AsyncClient, workflow_id: str) -> list[Event]:
    async def check() -> list[Event]:
        events = await client.history(workflow_id)
        return events if events and events[-1].type in CLOSE_TYPES else []

    return await wait_until(check, timeout=60)


async def marker_of(client: AsyncClient, workflow_id: str, step_type: str) -> bool:
    events = await client.history(workflow_id)
    return any(
        e.type == "Marker" and (e.attributes.get("details") or {}).get("type") == step_type
        for e in events
    )


def most_overlapping(log: Path) -> int:
    """The most `square` activities that ran at the same moment."""
    spans = [tuple(map(float, line.split()[1:])) for line in log.read_text().splitlines()]
    return max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)


async def test_a_step_workflow_runs_on_real_processes(
    node: ServerProcess, client: AsyncClient, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    task_list, name = unique("steps"), unique("everything")
    definitions = tmp_path / "definitions"
    definitions.mkdir()
    (definitions / "everything.yaml").write_text(EVERYTHING.format(name=name, task_list=task_list))
    work = tmp_path / "work"
    work.mkdir()
    decider = spawn(
        workers, node, tmp_path, "decider", "decider", "--definitions", str(definitions)
    )
    spawn(workers, node, tmp_path, "runner", "runner", "--task-list", task_list, ACTIVITIES)
    await wait_until(lambda: registered(decider, name), timeout=30)

    workflow_id = unique("wf")
    weft(
        node.address, "start", name, "--id", workflow_id, "--input", json.dumps({"dir": str(work)})
    )
    await wait_until(lambda: marker_of(client, workflow_id, "wait"), timeout=60)
    weft(node.address, "signal", workflow_id, "approve", "--input", json.dumps({"by": "ada"}))
    history = await closed_history(client, workflow_id)

    assert history[-1].type == "WorkflowSuccess", [e.type for e in history[-6:]]
    assert history[-1].get("result") == {
        "total": 21,
        "doubled": 42,
        "attempts": 3,
        "approver": "ada",
        "squares": [1, 4, 9, 16, 25, 36],
        "timed_out": "Timeout",
    }
    failed = [e for e in history if e.type == "ActivityFailed"]
    assert len(failed) == 2, "the flaky activity failed twice before it succeeded"
    backoffs = [e for e in history if e.type == "TimerScheduled"]
    assert any(str(e.get("timer_id")).endswith(":backoff") for e in backoffs)
    # foreach: never more than three squares at once, and three did overlap
    # (the first decision scheduled three).
    scheduled = [e for e in history if e.type == "ActivityScheduled"]
    squares = [e for e in scheduled if e.get("activity_type", {}).get("name") == "square"]
    assert len(squares) == 6
    first_batch = [
        e
        for e in squares
        if e.get("decider_completed_event_id") == squares[0].get("decider_completed_event_id")
    ]
    assert len(first_batch) == 3
    assert most_overlapping(work / "squares.log") <= 3
    # The step timeout cancelled the slow activity on the runner.
    assert any(e.type == "ActivityCancelRequested" for e in history)
    await wait_until(lambda: _exists(work / "slow.cancelled"), timeout=30)
    # The recorded history replays to the same decisions.
    check_history(
        load_file(definitions / "everything.yaml"),
        history,
        await run_id_of(client, workflow_id),
        workflow_id,
    )


async def _exists(path: Path) -> bool:
    return path.exists()


async def test_the_approval_example_runs_as_the_readme_says(
    node: ServerProcess, client: AsyncClient, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    examples = REPO / "examples"
    decider = spawn(
        workers, node, tmp_path, "decider", "decider", "--definitions", str(examples / "steps")
    )
    spawn(
        workers,
        node,
        tmp_path,
        "runner",
        "runner",
        "--task-list",
        "provisioning",
        "examples.approvals",
    )
    await wait_until(lambda: registered(decider, "provision-vm"), timeout=30)

    approved, denied = unique("vm"), unique("vm")
    weft(
        node.address,
        "start",
        "provision-vm",
        "--id",
        approved,
        "--input",
        json.dumps({"owner": "ada", "size": "small"}),
    )
    weft(
        node.address,
        "start",
        "provision-vm",
        "--id",
        denied,
        "--input",
        json.dumps({"owner": "bob", "size": "huge"}),
    )
    good = await closed_history(client, approved)
    bad = await closed_history(client, denied)

    assert good[-1].type == "WorkflowSuccess", [e.type for e in good[-6:]]
    result: dict[str, Any] = good[-1].get("result")
    assert result["vm_id"].startswith("vm-") and result["ip_address"].startswith("10.0.0.")
    assert result["request_id"].startswith("REQ-")
    assert bad[-1].type == "WorkflowFailed"
    assert bad[-1].get("reason") == "Fail"
    assert "denied" in bad[-1].get("details")["message"]
    definition = load_file(examples / "steps" / "provision-vm.yaml")
    for history, workflow_id in ((good, approved), (bad, denied)):
        check_history(definition, history, await run_id_of(client, workflow_id), workflow_id)

"""`replayable: automatically` with real processes: the runner doing a step is
killed with SIGKILL mid-activity; the heartbeat timeout notices, and the
workflow replays resuming by itself (here, back to its replay point, since the
write is not idempotent) on another runner, with no `on-error` of its own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sdk import AsyncClient
from tests.helpers import unique, wait_until
from tests.serverproc import ServerProcess
from tests.workerproc import WorkerProcess, spawn

DEFINITION = """\
name: {name}
task_list: {task_list}
replayable: automatically
steps:
  - step: activity read-counter
    input: {{counter: "${{input.counter}}"}}
    idempotent: yes
  - let x = ${{output}}
  - step: let x = ${{x}} + 1
    replayable: from here
  - step: activity write-counter
    input: {{counter: "${{input.counter}}", value: "${{x}}"}}
    task_list: {task_list}
    heartbeat: 1s
  - return ${{x}}
"""


async def test_a_killed_runner_is_replayed_around(
    node: ServerProcess, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    name, task_list = unique("auto"), unique("counters")
    folder = tmp_path / "defs"
    folder.mkdir()
    (folder / "auto.yaml").write_text(DEFINITION.format(name=name, task_list=task_list))
    counters, inflight = tmp_path / "counters.db", tmp_path / "inflight"
    env = {
        "WEFT_COUNTERS": str(counters),
        "WEFT_COUNTERS_INFLIGHT": str(inflight),
        "WEFT_COUNTERS_LINGER": "1.5",
    }
    spawn(workers, node, tmp_path, "decider", "decider", "--definitions", str(folder))
    runner_args = ("--task-list", task_list, "examples.counters")
    doomed = spawn(workers, node, tmp_path, "runner", "runner-1", *runner_args, env=env)
    async with AsyncClient(node.address) as client:

        async def started() -> str | None:
            try:
                run = await client.start_workflow(name, {"counter": "c"}, task_list=task_list)
            except Exception as exc:  # not registered yet
                if "not found" not in str(exc).lower() and "task_list" not in str(exc):
                    raise
                return None
            return run.workflow_id

        wid = await wait_until(started, timeout=30)
        assert doomed.proc is not None
        pid = str(doomed.proc.pid)
        await wait_until(lambda: _inside(inflight, pid), timeout=30)
        doomed.kill9()
        spawn(workers, node, tmp_path, "runner", "runner-2", *runner_args, env=env)
        assert await client.result(wid) == 1
        history = await client.history(wid)
    [timed_out] = [e for e in history if e.type == "ActivityTimedOut"]
    assert timed_out.get("timeout_type") == "HEARTBEAT"
    writes = [
        e
        for e in history
        if e.type == "ActivityScheduled" and "write" in str(e.get("activity_type"))
    ]
    assert len(writes) == 2
    with sqlite3.connect(counters) as conn:
        assert conn.execute("SELECT value FROM counters WHERE name = 'c'").fetchone()[0] == 1


async def _inside(inflight: Path, pid: str) -> bool:
    return inflight.exists() and pid in inflight.read_text().split()

"""`weft replay` as a real subprocess against a real `weft server` and a real
`weft decider`: a replay in place and one of a terminated run as a new run, the
refusals with their reason (exit 1), and usage errors (exit 2)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import stop
from tests.cli.support import error_line, ok, ok_json, weft
from tests.cli.test_cli_workers import Worker
from tests.helpers import unique, wait_until

FLOW = """\
name: {name}
task_list: {task_list}
replayable: from start
steps:
  - let x = 1
  - id: waiting
    step: wait signal go
  - step: let x = ${{x}} + 1
    idempotent: no
  - activity nobody-runs-this
  - return ${{x}}
"""


@pytest.fixture
def deciding(address: str, tmp_path: Path) -> Iterator[str]:
    """A registered step workflow type, and a `weft decider` for it; its name."""
    name, task_list = unique("replayable"), unique("steps")
    path = tmp_path / "flow.yaml"
    path.write_text(FLOW.format(name=name, task_list=task_list))
    ok(weft("register", str(path), address=address))
    decider = Worker(address, tmp_path, "decider", "decider", "--task-list", task_list)
    try:
        yield name
    finally:
        stop(decider.proc)


def started(address: str, name: str) -> str:
    doc: dict[str, Any] = ok_json(weft("start", name, "--json", address=address))
    return str(doc["workflow_id"])


async def waits_at(address: str, wid: str, step_type: str, times: int = 1) -> None:
    async def check() -> bool:
        events = ok_json(weft("history", wid, "--json", address=address))["events"]
        markers = [
            e
            for e in events
            if e["type"] == "Marker"
            and (e["attributes"].get("details") or {}).get("type") == step_type
        ]
        return len(markers) >= times

    await wait_until(check, timeout=30, interval=0.2)


async def test_replay_in_place_and_refusals(address: str, deciding: str) -> None:
    wid = started(address, deciding)
    await waits_at(address, wid, "wait")
    out = ok(weft("replay", wid, "--resuming", address=address))
    assert out.strip() == f"replaying run {_run(address, wid)} in place"
    await waits_at(address, wid, "wait", times=2)

    line = error_line(weft("replay", wid, "--from", "nowhere", address=address), "replay", 1)
    assert "refused" in line and "nowhere" in line
    weft("signal", wid, "go", address=address)
    await waits_at(address, wid, "activity")  # non-idempotent, and nobody runs it
    done = ok_json(weft("replay", wid, "--last", "--json", address=address))
    assert (done["new_run"], done["step"], done["resuming"]) == (False, 0, False)


async def test_a_terminated_run_replays_as_a_new_run(address: str, deciding: str) -> None:
    wid = started(address, deciding)
    await waits_at(address, wid, "wait")
    old_run = _run(address, wid)
    ok(weft("terminate", wid, "--reason", "stuck", address=address))
    out = ok(weft("replay", wid, "--from-start", "--reason", "retry it", address=address))
    new_run = out.strip().split()[-1]
    assert out.strip() == f"replaying run {old_run} as new run {new_run}"
    doc = ok_json(weft("describe", wid, "--json", address=address))
    assert (doc["run_id"], doc["replay_of_run_id"], doc["status"]) == (new_run, old_run, "open")
    assert _fields(ok(weft("describe", wid, address=address)))["replay_of"] == old_run
    old = ok(weft("describe", wid, "--run-id", old_run, address=address))
    assert _fields(old)["replayed_by"] == new_run
    await waits_at(address, wid, "wait")
    again = error_line(
        weft("replay", wid, "--run-id", old_run, "--last", address=address), "replay", 1
    )
    assert "replayed already" in again


@pytest.mark.parametrize(
    "args",
    [(), ("--resuming", "--last"), ("--from-start", "--from", "x")],
    ids=["no-mode", "two-modes", "mode-and-from"],
)
def test_replay_needs_exactly_one_mode(address: str, args: tuple[str, ...]) -> None:
    line = error_line(weft("replay", "someone", *args, address=address), "replay", 2)
    assert "--resuming" in line


def test_replay_of_an_unknown_workflow_exits_3(address: str) -> None:
    error_line(weft("replay", unique("nobody"), "--last", address=address), "replay", 3)


def test_replay_of_a_workflow_decided_by_code_exits_1(address: str, idle_task_list: str) -> None:
    wid = ok_json(
        weft("start", "cli-idle", "--task-list", idle_task_list, "--json", address=address)
    )["workflow_id"]
    line = error_line(weft("replay", wid, "--last", address=address), "replay", 1)
    assert "not a step workflow" in line


def _run(address: str, wid: str) -> str:
    return str(ok_json(weft("describe", wid, "--json", address=address))["run_id"])


def _fields(described: str) -> dict[str, str]:
    out = {}
    for line in described.splitlines():
        key, _, value = line.partition(" ")
        out[key] = value.strip()
    return out

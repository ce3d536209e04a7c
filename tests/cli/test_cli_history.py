"""`weft history`: the table, the `--json` document of CONTRACT.md, `--run-id`,
and `--follow` streaming a live run until it closes."""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import stop
from tests.cli.support import REPO, argv, clean_env, error_line, eventually, ok, ok_json, weft
from tests.helpers import unique, wait_until

RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
# Attributes whose values are the user's own JSON: their keys are not ours to check.
USER_DATA = {"input", "result", "details", "heartbeat_details", "last_heartbeat_details"}


def start_flow(address: str, task_list: str, plan: Any) -> str:
    doc = ok_json(
        weft(
            "start", "cli-flow", "--task-list", task_list, "--input", json.dumps(plan), "--json",
            address=address,
        )
    )  # fmt: skip
    workflow_id: str = doc["workflow_id"]
    return workflow_id


def snake_case_keys(value: Any, where: str = "attributes") -> list[str]:
    """Every dict key under `value` that is not snake_case, except inside user data."""
    bad = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if not SNAKE.match(str(key)):
                bad.append(f"{where}.{key}")
            if key not in USER_DATA:
                bad += snake_case_keys(inner, f"{where}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            bad += snake_case_keys(inner, f"{where}[{i}]")
    return bad


@pytest.fixture(scope="module")
def completed_run(address: str, flow_task_list: str) -> dict[str, str]:
    """A cli-flow run that waited for a signal and completed with its input."""
    wid = start_flow(address, flow_task_list, {"wait_for": "finish", "camelCaseInput": 1})
    ok(weft("signal", wid, "finish", "--input", '{"ok": true}', address=address))

    def done() -> dict[str, Any] | None:
        doc: dict[str, Any] = ok_json(weft("describe", wid, "--json", address=address))
        return doc if doc["status"] != "open" else None

    found = eventually(done, timeout=20, interval=0.2)
    assert found["status"] == "completed", found
    return {"workflow_id": wid, "run_id": found["run_id"]}


def test_history_table_lists_the_events(address: str, completed_run: dict[str, str]) -> None:
    out = ok(weft("history", completed_run["workflow_id"], address=address))
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "TIME", "TYPE", "DETAILS"]
    types = [line.split()[2] for line in lines[1:]]
    ids = [int(line.split()[0]) for line in lines[1:]]
    assert ids == list(range(1, len(ids) + 1))
    assert types[0] == "WorkflowStarted"
    assert types[-1] == "WorkflowSuccess"
    for kind in ("DeciderScheduled", "DeciderStarted", "DeciderCompleted", "Signal"):
        assert kind in types, out
    assert "signal_name=finish" in out


def test_history_json_has_the_contract_shape(address: str, completed_run: dict[str, str]) -> None:
    wid = completed_run["workflow_id"]
    doc = ok_json(weft("history", wid, "--json", address=address))
    assert set(doc) == {"workflow_id", "run_id", "events"}
    assert doc["workflow_id"] == wid
    assert doc["run_id"] == completed_run["run_id"]
    events = doc["events"]
    assert [e["event_id"] for e in events] == list(range(1, len(events) + 1))
    for event in events:
        assert set(event) == {"event_id", "type", "timestamp", "attributes"}, event
        assert isinstance(event["event_id"], int) and not isinstance(event["event_id"], bool)
        assert isinstance(event["type"], str)
        assert RFC3339.match(event["timestamp"]), event["timestamp"]
        datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))
        assert isinstance(event["attributes"], dict)
        assert snake_case_keys(event["attributes"]) == [], event
    stamps = [datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")) for e in events]
    assert stamps == sorted(stamps)
    started, last = events[0], events[-1]
    assert started["type"] == "WorkflowStarted"
    assert started["attributes"]["input"] == {"wait_for": "finish", "camelCaseInput": 1}
    assert started["attributes"]["task_list"]
    signal = next(e for e in events if e["type"] == "Signal")
    assert signal["attributes"]["signal_name"] == "finish"
    assert signal["attributes"]["input"] == {"ok": True}
    assert last["type"] == "WorkflowSuccess"
    assert last["attributes"]["result"] == {"signal": {"ok": True}}


def test_history_of_an_earlier_run(address: str) -> None:
    wid, task_list = unique("cli-runs"), unique("idle")
    first = ok_json(
        weft("start", "cli-idle", "--id", wid, "--task-list", task_list, "--json", address=address)
    )
    ok(weft("terminate", wid, "--reason", "first run", address=address))
    second = ok_json(
        weft("start", "cli-idle", "--id", wid, "--task-list", task_list, "--json", address=address)
    )
    latest = ok_json(weft("history", wid, "--json", address=address))
    assert latest["run_id"] == second["run_id"]
    assert latest["events"][-1]["type"] != "WorkflowTerminated"
    earlier = ok_json(weft("history", wid, "--run-id", first["run_id"], "--json", address=address))
    assert earlier["run_id"] == first["run_id"]
    assert earlier["events"][-1]["type"] == "WorkflowTerminated"
    assert earlier["events"][-1]["attributes"]["reason"] == "first run"


@pytest.mark.parametrize("args", [[], ["--json"], ["--follow"]], ids=["table", "json", "follow"])
def test_history_of_an_unknown_workflow_exits_3(args: list[str], address: str) -> None:
    wid = unique("missing")
    done = weft("history", wid, *args, address=address, timeout=30)
    line = error_line(done, "history", 3)
    assert wid in line
    assert done.stdout == ""


def test_history_of_an_unknown_run_exits_3(address: str, completed_run: dict[str, str]) -> None:
    done = weft(
        "history", completed_run["workflow_id"], "--run-id", unique("no-run"), address=address
    )
    error_line(done, "history", 3)
    assert done.stdout == ""


def test_follow_of_an_unknown_run_prints_nothing(
    address: str, completed_run: dict[str, str]
) -> None:
    done = weft(
        "history", completed_run["workflow_id"], "--run-id", unique("no-run"), "--follow",
        address=address, timeout=30,
    )  # fmt: skip
    error_line(done, "history", 3)
    assert done.stdout == ""


def test_follow_of_a_closed_run_prints_it_and_exits(
    address: str, completed_run: dict[str, str]
) -> None:
    done = weft("history", completed_run["workflow_id"], "--follow", address=address, timeout=30)
    out = ok(done)
    assert out.splitlines()[0].split() == ["ID", "TIME", "TYPE", "DETAILS"]
    assert out.splitlines()[-1].split()[2] == "WorkflowSuccess"


class Follower:
    """`weft history ID --follow …` running in the background, stdout to a file."""

    def __init__(self, address: str, workflow_id: str, out: Path, *args: str) -> None:
        self.out = out
        self.err = out.with_suffix(".err")
        with self.out.open("w") as stdout, self.err.open("w") as stderr:
            self.proc = subprocess.Popen(
                argv("history", address, workflow_id, "--follow", *args),
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                env=clean_env(),
                cwd=REPO,
            )

    def text(self) -> str:
        return self.out.read_text()

    async def printed(self, what: str) -> None:
        async def check() -> bool:
            assert self.proc.poll() is None or what in self.text(), self.report()
            return what in self.text()

        await wait_until(check, timeout=20, interval=0.05)

    async def exited(self, timeout: float = 20) -> int:
        async def check() -> bool:
            return self.proc.poll() is not None

        await wait_until(check, timeout=timeout, interval=0.05)
        return self.proc.returncode

    def report(self) -> str:
        return (
            f"exit {self.proc.poll()}\n--- stdout\n{self.text()}--- stderr\n{self.err.read_text()}"
        )


async def test_follow_streams_until_the_run_closes(
    address: str, flow_task_list: str, tmp_path: Path
) -> None:
    wid = start_flow(address, flow_task_list, {"wait_for": "finish"})
    follower = Follower(address, wid, tmp_path / "follow.out")
    try:
        await follower.printed("DeciderCompleted")  # the first decision, while still open
        assert "WorkflowSuccess" not in follower.text()
        t0 = time.monotonic()
        assert follower.proc.poll() is None, follower.report()
        ok(weft("signal", wid, "finish", "--input", '"now"', address=address))
        assert await follower.exited() == 0, follower.report()
        assert time.monotonic() - t0 < 15
        assert follower.err.read_text() == ""
        lines = follower.text().splitlines()
        assert lines[0].split() == ["ID", "TIME", "TYPE", "DETAILS"]
        rows = [line.split() for line in lines[1:]]
        assert [int(r[0]) for r in rows] == list(range(1, len(rows) + 1))
        types = [r[2] for r in rows]
        assert types[0] == "WorkflowStarted"
        assert "Signal" in types
        assert types[-1] == "WorkflowSuccess"
    finally:
        stop(follower.proc)


async def test_follow_json_streams_one_event_per_line(
    address: str, flow_task_list: str, tmp_path: Path
) -> None:
    wid = start_flow(address, flow_task_list, {"wait_for": "finish"})
    follower = Follower(address, wid, tmp_path / "follow.jsonl", "--json")
    try:
        await follower.printed('"DeciderCompleted"')
        ok(weft("terminate", wid, "--reason", "enough", address=address))
        assert await follower.exited() == 0, follower.report()
        events = [json.loads(line) for line in follower.text().splitlines()]
        assert [e["event_id"] for e in events] == list(range(1, len(events) + 1))
        for event in events:
            assert set(event) == {"event_id", "type", "timestamp", "attributes"}
        assert events[-1]["type"] == "WorkflowTerminated"
        assert events[-1]["attributes"]["reason"] == "enough"
    finally:
        stop(follower.proc)

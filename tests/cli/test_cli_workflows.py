"""`weft start`, `signal`, `cancel`, `terminate`, `describe` and `list` as real
subprocesses against a real `weft server`: what they print on success, and the
exit code and one-line message of each kind of failure (CONTRACT.md: 0 success,
1 operation failed, 2 usage, 3 not found, 4 server unreachable)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.cli.support import error_line, ok, ok_json, weft
from tests.helpers import unique, wait_until

IDS = re.compile(r"^workflow_id  (\S+)\nrun_id       (\S+)$", re.M)


def start_idle(address: str, task_list: str, *args: str, wtype: str = "cli-idle") -> dict[str, Any]:
    """Start a run nobody decides: it stays open."""
    doc: dict[str, Any] = ok_json(
        weft("start", wtype, "--task-list", task_list, "--json", *args, address=address)
    )
    return doc


def describe(address: str, workflow_id: str, *args: str) -> dict[str, Any]:
    doc: dict[str, Any] = ok_json(weft("describe", workflow_id, "--json", *args, address=address))
    return doc


def history(address: str, workflow_id: str, *args: str) -> list[dict[str, Any]]:
    doc = ok_json(weft("history", workflow_id, "--json", *args, address=address))
    events: list[dict[str, Any]] = doc["events"]
    return events


async def closed(address: str, workflow_id: str, timeout: float = 20) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        doc = describe(address, workflow_id)
        return doc if doc["status"] != "open" else None

    found = await wait_until(check, timeout=timeout, interval=0.2)
    assert found is not None
    return found


# -- start -----------------------------------------------------------------------------


def test_start_prints_the_workflow_id_and_run_id(address: str, idle_task_list: str) -> None:
    wid = unique("cli-start")
    out = ok(
        weft(
            "start",
            "cli-idle",
            "--id",
            wid,
            "--task-list",
            idle_task_list,
            "--input",
            '{"n": 1}',
            "--execution-timeout",
            "1h30m",
            "--decider-timeout",
            "45s",
            address=address,
        )
    )
    found = IDS.search(out)
    assert found, out
    assert found.group(1) == wid
    doc = describe(address, wid)
    assert doc["run_id"] == found.group(2)
    assert doc["status"] == "open"
    assert doc["workflow_type"] == "cli-idle"
    assert doc["task_list"] == idle_task_list
    assert doc["execution_timeout"] == 5400
    assert doc["decider_timeout"] == 45
    started = history(address, wid)[0]
    assert started["type"] == "WorkflowStarted"
    assert started["attributes"]["input"] == {"n": 1}


def test_start_json_is_one_document(address: str, idle_task_list: str) -> None:
    doc = start_idle(address, idle_task_list)
    assert set(doc) == {"workflow_id", "run_id"}
    assert doc["workflow_id"].startswith("cli-idle-")
    assert describe(address, doc["workflow_id"])["run_id"] == doc["run_id"]


def test_start_wait_prints_the_result(address: str, flow_task_list: str) -> None:
    done = weft(
        "start",
        "cli-flow",
        "--task-list",
        flow_task_list,
        "--input",
        '{"n": 7}',
        "--wait",
        "--timeout",
        "30s",
        address=address,
    )
    out = ok(done)
    assert IDS.search(out), out
    result = re.search(r"^result       (.*)$", out, re.M)
    assert result, out
    assert json.loads(result.group(1)) == {"echo": {"n": 7}}


def test_start_wait_json_has_the_result(address: str, flow_task_list: str) -> None:
    doc = ok_json(
        weft(
            "start",
            "cli-flow",
            "--task-list",
            flow_task_list,
            "--input",
            '["a", 2]',
            "--wait",
            "--json",
            address=address,
        )
    )
    assert doc["status"] == "completed"
    assert doc["result"] == {"echo": ["a", 2]}
    assert describe(address, doc["workflow_id"])["status"] == "completed"


def test_start_wait_on_a_failing_workflow_exits_1(address: str, flow_task_list: str) -> None:
    done = weft(
        "start",
        "cli-flow",
        "--task-list",
        flow_task_list,
        "--input",
        '{"fail": "out of stock"}',
        "--wait",
        address=address,
    )
    line = error_line(done, "start", 1)
    assert "failed" in line and "out of stock" in line
    found = IDS.search(done.stdout)
    assert found, done.stdout  # the ids were printed before the wait
    assert describe(address, found.group(1))["status"] == "failed"


def test_start_wait_json_on_a_failing_workflow(address: str, flow_task_list: str) -> None:
    done = weft(
        "start",
        "cli-flow",
        "--task-list",
        flow_task_list,
        "--input",
        '{"fail": "card declined"}',
        "--wait",
        "--json",
        address=address,
    )
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) <= 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["reason"] == "card declined"
    assert doc["details"] == {"asked": True}


def test_start_wait_json_status_uses_the_status_vocabulary(
    address: str, flow_task_list: str
) -> None:
    done = weft(
        "start",
        "cli-flow",
        "--task-list",
        flow_task_list,
        "--input",
        '{"fail": "nope"}',
        "--wait",
        "--json",
        address=address,
    )
    assert done.returncode == 1
    doc = json.loads(done.stdout)
    assert doc["status"] == describe(address, doc["workflow_id"])["status"] == "failed"


def test_start_wait_json_that_gives_up_still_says_which_run(
    address: str, idle_task_list: str
) -> None:
    """The run started: stdout names it, open, even when the wait gives up."""
    done = weft(
        "start", "cli-idle", "--task-list", idle_task_list, "--wait", "--timeout", "0s", "--json",
        address=address,
    )  # fmt: skip
    line = error_line(done, "start", 1)
    assert "did not close within" in line
    doc = json.loads(done.stdout)
    assert doc["status"] == describe(address, doc["workflow_id"])["status"] == "open"
    assert doc["run_id"] and "did not close within" in doc["waited"]


def test_start_timeout_without_wait_is_a_usage_error(address: str, idle_task_list: str) -> None:
    done = weft(
        "start", "cli-idle", "--task-list", idle_task_list, "--timeout", "5s", address=address
    )
    assert "--timeout goes with --wait" in error_line(done, "start", 2)
    assert not done.stdout  # nothing was started


def test_start_wait_on_a_run_that_times_out_exits_1(address: str, idle_task_list: str) -> None:
    done = weft(
        "start", "cli-idle", "--task-list", idle_task_list, "--execution-timeout", "1s",
        "--wait", "--timeout", "30s",
        address=address,
    )  # fmt: skip
    line = error_line(done, "start", 1)
    assert "timed out" in line
    found = IDS.search(done.stdout)
    assert found, done.stdout
    assert describe(address, found.group(1))["status"] == "timed_out"


def test_start_wait_gives_up_after_timeout(address: str, idle_task_list: str) -> None:
    done = weft(
        "start", "cli-idle", "--task-list", idle_task_list, "--wait", "--timeout", "500ms",
        address=address,
    )  # fmt: skip
    line = error_line(done, "start", 1)
    assert "did not close" in line


def test_start_with_an_id_already_open_exits_1(address: str, idle_task_list: str) -> None:
    wid = unique("cli-dup")
    first = start_idle(address, idle_task_list, "--id", wid)
    done = weft("start", "cli-idle", "--id", wid, "--task-list", idle_task_list, address=address)
    line = error_line(done, "start", 1)
    assert wid in line and "already" in line
    assert done.stdout == ""
    # nothing changed: the first run is still the one
    assert describe(address, wid)["run_id"] == first["run_id"]


def test_start_reuses_an_id_once_its_run_is_closed(address: str, idle_task_list: str) -> None:
    wid = unique("cli-reuse")
    first = start_idle(address, idle_task_list, "--id", wid)
    ok(weft("terminate", wid, address=address))
    second = start_idle(address, idle_task_list, "--id", wid)
    assert second["run_id"] != first["run_id"]
    assert describe(address, wid)["run_id"] == second["run_id"]
    assert describe(address, wid, "--run-id", first["run_id"])["status"] == "terminated"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--input", "{bad json"], "--input"),
        (["--input", ""], "--input"),
        (["--execution-timeout", "5x"], "--execution-timeout"),
        (["--decider-timeout", "ten seconds"], "--decider-timeout"),
        (["--wait", "--timeout", "soon"], "--timeout"),
        (["--execution-timeout", "0s"], "execution_timeout"),
        (["--id", "x" * 1001], "workflow_id"),
        (["--id", "   "], "workflow_id is only whitespace"),
        (["--task-list", "tab\there"], "control characters"),
    ],
    ids=[
        "bad-json",
        "empty-json",
        "bad-execution-timeout",
        "bad-decider-timeout",
        "bad-wait-timeout",
        "zero-execution-timeout",
        "id-too-long",
        "id-of-spaces",
        "control-char-task-list",
    ],
)
def test_start_bad_input_exits_2(
    args: list[str], says: str, address: str, idle_task_list: str
) -> None:
    done = weft("start", "cli-idle", "--task-list", idle_task_list, *args, address=address)
    line = error_line(done, "start", 2)
    assert says in line
    assert done.stdout == ""


def test_start_without_a_task_list_for_an_unregistered_type_exits_2(address: str) -> None:
    done = weft("start", unique("never-registered"), address=address)
    line = error_line(done, "start", 2)
    assert "task_list is required" in line


# -- signal ----------------------------------------------------------------------------


def test_signal_appends_a_signal_event(address: str, idle_task_list: str) -> None:
    wid = start_idle(address, idle_task_list)["workflow_id"]
    out = ok(weft("signal", wid, "approved", "--input", '{"by": "ann"}', address=address))
    assert out.strip() == f"signaled {wid}: approved"
    signals = [e for e in history(address, wid) if e["type"] == "Signal"]
    assert len(signals) == 1
    assert signals[0]["attributes"]["signal_name"] == "approved"
    assert signals[0]["attributes"]["input"] == {"by": "ann"}


def test_signal_with_the_same_request_id_is_delivered_once(
    address: str, idle_task_list: str
) -> None:
    wid = start_idle(address, idle_task_list)["workflow_id"]
    for _ in range(2):
        ok(weft("signal", wid, "poke", "--request-id", "req-1", address=address))
    ok(weft("signal", wid, "poke", "--request-id", "req-2", address=address))
    signals = [e for e in history(address, wid) if e["type"] == "Signal"]
    assert len(signals) == 2, signals


def test_signal_to_a_specific_run(address: str, idle_task_list: str) -> None:
    run = start_idle(address, idle_task_list)
    wid, rid = run["workflow_id"], run["run_id"]
    ok(weft("signal", wid, "pinned", "--run-id", rid, address=address))
    assert [e["type"] for e in history(address, wid)][-1] == "Signal"
    done = weft("signal", wid, "pinned", "--run-id", unique("no-such-run"), address=address)
    error_line(done, "signal", 3)


def test_signal_to_an_unknown_workflow_exits_3(address: str) -> None:
    wid = unique("missing")
    line = error_line(weft("signal", wid, "hello", address=address), "signal", 3)
    assert wid in line and "not found" in line


def test_signal_to_a_closed_run_exits_1(address: str, idle_task_list: str) -> None:
    wid = start_idle(address, idle_task_list)["workflow_id"]
    ok(weft("terminate", wid, address=address))
    line = error_line(weft("signal", wid, "late", address=address), "signal", 1)
    assert "closed" in line


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["s", "--input", "nope{"], 2),
        (
            [
                "",
            ],
            2,
        ),
    ],
    ids=["bad-json", "empty-name"],
)
def test_signal_bad_input_exits_2(
    args: list[str], code: int, address: str, idle_task_list: str
) -> None:
    wid = start_idle(address, idle_task_list)["workflow_id"]
    error_line(weft("signal", wid, *args, address=address), "signal", code)
    assert not [e for e in history(address, wid) if e["type"] == "Signal"]


# -- cancel ----------------------------------------------------------------------------


async def test_cancel_asks_the_decider_which_cancels(address: str, flow_task_list: str) -> None:
    run = ok_json(
        weft(
            "start", "cli-flow", "--task-list", flow_task_list,
            "--input", '{"wait_for": "never"}', "--json",
            address=address,
        )
    )  # fmt: skip
    wid = run["workflow_id"]
    out = ok(weft("cancel", wid, "--reason", "changed my mind", address=address))
    assert out.strip() == f"cancel requested: {wid}"
    assert (await closed(address, wid))["status"] == "canceled"
    events = history(address, wid)
    types = [e["type"] for e in events]
    assert "WorkflowCancelRequested" in types
    assert types[-1] == "WorkflowCanceled"
    requested = next(e for e in events if e["type"] == "WorkflowCancelRequested")
    assert requested["attributes"].get("reason") == "changed my mind"


def test_cancel_an_unknown_workflow_exits_3(address: str) -> None:
    error_line(weft("cancel", unique("missing"), address=address), "cancel", 3)


def test_cancel_a_closed_run_exits_1(address: str, idle_task_list: str) -> None:
    wid = start_idle(address, idle_task_list)["workflow_id"]
    ok(weft("terminate", wid, address=address))
    line = error_line(weft("cancel", wid, address=address), "cancel", 1)
    assert "closed" in line


# -- terminate -------------------------------------------------------------------------


def test_terminate_closes_the_run_with_the_reason(address: str, idle_task_list: str) -> None:
    wid = start_idle(address, idle_task_list)["workflow_id"]
    out = ok(weft("terminate", wid, "--reason", "stuck since Tuesday", address=address))
    assert out.strip() == f"terminated: {wid}"
    last = history(address, wid)[-1]
    assert last["type"] == "WorkflowTerminated"
    assert last["attributes"]["reason"] == "stuck since Tuesday"
    assert describe(address, wid)["status"] == "terminated"


def test_terminate_a_closed_run_exits_1(address: str, idle_task_list: str) -> None:
    wid = start_idle(address, idle_task_list)["workflow_id"]
    ok(weft("terminate", wid, address=address))
    line = error_line(weft("terminate", wid, "--reason", "again", address=address), "terminate", 1)
    assert "already closed" in line
    assert [e["type"] for e in history(address, wid)].count("WorkflowTerminated") == 1


def test_terminate_an_unknown_workflow_exits_3(address: str) -> None:
    error_line(weft("terminate", unique("missing"), address=address), "terminate", 3)


def test_terminate_an_unknown_run_exits_3(address: str, idle_task_list: str) -> None:
    wid = start_idle(address, idle_task_list)["workflow_id"]
    done = weft("terminate", wid, "--run-id", unique("no-such-run"), address=address)
    error_line(done, "terminate", 3)
    assert describe(address, wid)["status"] == "open"


# -- describe --------------------------------------------------------------------------


def test_describe_for_people(address: str, idle_task_list: str) -> None:
    run = start_idle(address, idle_task_list, "--execution-timeout", "2h")
    out = ok(weft("describe", run["workflow_id"], address=address))
    fields: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        fields[key] = value.strip()
    assert fields["workflow_id"] == run["workflow_id"]
    assert fields["run_id"] == run["run_id"]
    assert fields["type"] == "cli-idle"
    assert fields["task_list"] == idle_task_list
    assert fields["status"] == "open"
    assert fields["closed"] == "-"
    assert fields["history"] == "2 events"
    assert fields["decider"] == "scheduled"
    assert fields["timeouts"] == "execution 2h, decider 10s"


def test_describe_json(address: str, idle_task_list: str) -> None:
    run = start_idle(address, idle_task_list)
    doc = describe(address, run["workflow_id"])
    assert {
        "workflow_id",
        "run_id",
        "workflow_type",
        "task_list",
        "status",
        "start_time",
        "close_time",
        "history_length",
        "decider_state",
        "execution_timeout",
        "decider_timeout",
        "cancel_requested",
        "pending_activities",
        "pending_timers",
    } <= set(doc)
    assert doc["workflow_id"] == run["workflow_id"]
    assert doc["run_id"] == run["run_id"]
    assert doc["status"] == "open"
    assert doc["close_time"] is None
    assert doc["start_time"].endswith("Z")
    assert doc["cancel_requested"] is False
    assert doc["pending_activities"] == doc["pending_timers"] == []


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_describe_an_unknown_workflow_exits_3(as_json: bool, address: str) -> None:
    wid = unique("missing")
    done = weft("describe", wid, *(["--json"] if as_json else []), address=address)
    line = error_line(done, "describe", 3)
    assert wid in line
    assert done.stdout == ""


def test_describe_an_unknown_run_exits_3(address: str, idle_task_list: str) -> None:
    wid = start_idle(address, idle_task_list)["workflow_id"]
    done = weft("describe", wid, "--run-id", unique("no-such-run"), address=address)
    error_line(done, "describe", 3)


def test_describe_an_empty_id_exits_2(address: str) -> None:
    error_line(weft("describe", "", address=address), "describe", 2)


# -- list ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def listed(address: str) -> tuple[str, list[str]]:
    """Three runs of a type of their own, oldest first; the first is terminated."""
    wtype, task_list = unique("cli-list"), unique("idle")
    ids = [
        ok_json(weft("start", wtype, "--task-list", task_list, "--json", address=address))[
            "workflow_id"
        ]
        for _ in range(3)
    ]
    ok(weft("terminate", ids[0], address=address))
    return wtype, ids


def test_list_json_newest_first(address: str, listed: tuple[str, list[str]]) -> None:
    wtype, ids = listed
    doc = ok_json(weft("list", "--type", wtype, "--json", address=address))
    assert set(doc) == {"executions"}
    runs = doc["executions"]
    assert [r["workflow_id"] for r in runs] == ids[::-1]
    assert {r["workflow_type"] for r in runs} == {wtype}
    assert [r["status"] for r in runs] == ["open", "open", "terminated"]


def test_list_open_and_closed(address: str, listed: tuple[str, list[str]]) -> None:
    wtype, ids = listed
    open_ = ok_json(weft("list", "--open", "--type", wtype, "--json", address=address))
    assert [r["workflow_id"] for r in open_["executions"]] == [ids[2], ids[1]]
    closed_ = ok_json(weft("list", "--closed", "--type", wtype, "--json", address=address))
    assert [r["workflow_id"] for r in closed_["executions"]] == [ids[0]]
    assert closed_["executions"][0]["close_time"]


def test_list_limit(address: str, listed: tuple[str, list[str]]) -> None:
    wtype, ids = listed
    doc = ok_json(weft("list", "--type", wtype, "--limit", "1", "--json", address=address))
    assert [r["workflow_id"] for r in doc["executions"]] == [ids[2]]


def test_list_table(address: str, listed: tuple[str, list[str]]) -> None:
    wtype, ids = listed
    out = ok(weft("list", "--type", wtype, address=address))
    lines = out.splitlines()
    assert lines[0].split() == [
        "WORKFLOW",
        "ID",
        "RUN",
        "ID",
        "TYPE",
        "STATUS",
        "STARTED",
        "CLOSED",
    ]
    assert [line.split()[0] for line in lines[1:]] == ids[::-1]
    assert "terminated" in lines[3]


def test_list_everything_includes_other_types(address: str, listed: tuple[str, list[str]]) -> None:
    doc = ok_json(weft("list", "--limit", "10000", "--json", address=address))
    found = {r["workflow_id"] for r in doc["executions"]}
    assert set(listed[1]) <= found


def test_list_of_a_type_with_no_runs(address: str) -> None:
    out = ok(weft("list", "--type", unique("no-runs"), address=address))
    assert out.strip() == "no workflows"
    doc = ok_json(weft("list", "--type", unique("no-runs"), "--json", address=address))
    assert doc == {"executions": []}


@pytest.mark.parametrize(
    "args",
    [["--limit", "0"], ["--limit", "-3"], ["--limit", "many"], ["--limit", "10001"]],
    ids=["zero", "negative", "not-a-number", "too-many"],
)
def test_list_bad_limit_exits_2(args: list[str], address: str) -> None:
    done = weft("list", *args, address=address)
    line = error_line(done, "list", 2)
    assert "--limit" in line
    assert done.stdout == ""

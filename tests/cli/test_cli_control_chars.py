"""Control characters in what the CLI prints are written as escapes (issue 15,
finding 10): a signal's input that sets the terminal's title, moves the cursor
or starts an 8-bit sequence is shown as text by `weft history` and `weft start
--wait`, and JSON output holds none raw either."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.cli.support import ok, ok_json, weft
from tests.helpers import wait_until

HOSTILE = "\x1b]0;pwned\x07 \x9b31m red \x7f"
SHOWN = "\\x1b]0;pwned\\x07 \\x9b31m red \\x7f"
# Inside a JSON value: JSON's escapes for C0, the CLI's for the rest.
SHOWN_IN_JSON = "\\u001b]0;pwned\\u0007 \\x9b31m red \\x7f"
# Anything a terminal could act on, newline and tab aside.
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def start_flow(address: str, task_list: str, plan: Any) -> str:
    args = ["--task-list", task_list, "--input", json.dumps(plan), "--json"]
    wid: str = ok_json(weft("start", "cli-flow", *args, address=address))["workflow_id"]
    return wid


def signalled_run(address: str, task_list: str) -> str:
    """A cli-flow run closed by a signal whose input is text with control characters
    (names with them are refused by the server)."""
    wid = start_flow(address, task_list, {"wait_for": "finish"})
    ok(weft("signal", wid, "finish", "--input", json.dumps(HOSTILE), address=address))
    return wid


async def test_history_shows_control_characters_as_escapes(
    address: str, flow_task_list: str
) -> None:
    wid = signalled_run(address, flow_task_list)

    async def closed() -> str:
        out = ok(weft("history", wid, address=address))
        return out if "WorkflowSuccess" in out else ""

    table = await wait_until(closed, timeout=30)
    assert not RAW_CONTROL.search(table), repr(table)
    assert f"input={SHOWN}" in table and SHOWN_IN_JSON in table, table

    followed = ok(weft("history", wid, "--follow", address=address))
    assert not RAW_CONTROL.search(followed), repr(followed)
    assert f"input={SHOWN}" in followed, followed

    for args in (["--json"], ["--json", "--follow"]):
        out = ok(weft("history", wid, *args, address=address))
        assert not RAW_CONTROL.search(out), repr(out)
        if "--follow" in args:
            events: list[Any] = [json.loads(line) for line in out.splitlines()]
        else:
            events = json.loads(out)["events"]
        inputs = [e["attributes"].get("input") for e in events if e["type"] == "Signal"]
        assert inputs == [HOSTILE]  # the same document


async def test_a_failure_reason_is_shown_escaped(address: str, flow_task_list: str) -> None:
    wid = start_flow(address, flow_task_list, {"fail": HOSTILE})

    async def closed() -> str:
        out = ok(weft("history", wid, address=address))
        return out if "WorkflowFailed" in out else ""

    table = await wait_until(closed, timeout=30)
    assert not RAW_CONTROL.search(table) and f"reason={SHOWN}" in table, repr(table)


def test_start_wait_shows_the_result_escaped(address: str, flow_task_list: str) -> None:
    plan = {"result": HOSTILE}
    args = ["--task-list", flow_task_list, "--input", json.dumps(plan), "--wait"]
    out = ok(weft("start", "cli-flow", *args, address=address))
    assert not RAW_CONTROL.search(out) and SHOWN_IN_JSON in out, repr(out)

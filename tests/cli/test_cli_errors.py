"""Errors common to every command: usage errors (exit 2) and an unreachable
server (exit 4), each reported as one line on stderr, never a traceback."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.support import (
    argv,
    error_line,
    raw_weft,
    run_all,
    spawn,
    unreachable_address,
    weft,
)
from tests.helpers import unique, wait_until
from tests.serverproc import ServerProcess

# (command, arguments): each must be refused before anything is sent anywhere
USAGE_ERRORS = {
    "start-missing-type": ("start", []),
    "start-unknown-option": ("start", ["t", "--task-list", "tl", "--bogus"]),
    "start-extra-argument": ("start", ["t", "extra", "--task-list", "tl"]),
    "start-input-without-value": ("start", ["t", "--input"]),
    "start-timeout-without-wait": ("start", ["t", "--task-list", "tl", "--timeout", "5s"]),
    "signal-missing-name": ("signal", ["wf"]),
    "signal-unknown-option": ("signal", ["wf", "go", "--bogus"]),
    "cancel-missing-id": ("cancel", []),
    "cancel-unknown-option": ("cancel", ["wf", "--force"]),
    "terminate-missing-id": ("terminate", []),
    "terminate-reason-without-value": ("terminate", ["wf", "--reason"]),
    "describe-missing-id": ("describe", []),
    "describe-unknown-option": ("describe", ["wf", "--bogus"]),
    "history-missing-id": ("history", []),
    "history-unknown-option": ("history", ["wf", "--tail"]),
    "list-unknown-option": ("list", ["--running"]),
    "list-extra-argument": ("list", ["open"]),
    "list-limit-without-value": ("list", ["--limit"]),
    "register-missing-file": ("register", []),
    "register-unknown-option": ("register", ["f.yaml", "--force"]),
    "runner-missing-module": ("runner", []),
    "runner-unknown-option": ("runner", ["examples.order", "--bogus"]),
    "decider-missing-module": ("decider", []),
    "decider-unknown-option": ("decider", ["examples.order", "--bogus"]),
    # Past what Python can hold: refused as text, not an OverflowError or a RecursionError.
    "start-timeout-past-any-date": (
        "start",
        ["t", "--task-list", "tl", "--execution-timeout", "99999999999h"],
    ),
    "start-input-nested-past-the-reader": (
        "start",
        ["t", "--task-list", "tl", "--input", "[" * 100_000],
    ),
    # Text that cannot be sent: bytes that are not UTF-8 (Python keeps them as lone
    # surrogates), and a JSON escape of a lone surrogate.
    "describe-id-not-utf8": ("describe", ["a\udcffb"]),
    "start-input-lone-surrogate": ("start", ["t", "--task-list", "tl", "--input", '"\\ud800"']),
    "list-api-key-a-header-cannot-carry": ("list", ["--api-key", "clé"]),
    "runner-unknown-log-level": ("runner", ["examples.order", "--log-level", "bogus"]),
    "decider-unknown-log-level": ("decider", ["examples.order", "--log-level", "bogus"]),
}


@pytest.fixture(scope="module")
def usage_errors() -> dict[str, subprocess.CompletedProcess[str]]:
    """Every case of USAGE_ERRORS, run in parallel, against an address nothing
    listens on: were a usage error not caught, the command would fail differently
    (exit 4) instead of reaching some real server."""
    nowhere = unreachable_address()
    commands = [argv(command, nowhere, *args) for command, args in USAGE_ERRORS.values()]
    return dict(zip(USAGE_ERRORS, run_all(commands, timeout=60), strict=True))


@pytest.mark.parametrize(
    "case",
    [pytest.param(case, id=case) for case in USAGE_ERRORS],
)
def test_usage_error_exits_2_in_one_line(
    case: str, usage_errors: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    done = usage_errors[case]
    error_line(done, USAGE_ERRORS[case][0], 2)
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("args", "says"),
    [([], "Usage"), (["bogus"], "bogus"), (["--bogus", "list"], "--bogus")],
    ids=["no-command", "unknown-command", "unknown-global-option"],
)
def test_usage_error_before_a_command_exits_2(args: list[str], says: str) -> None:
    done = raw_weft(*args, timeout=30)
    line = error_line(done, "", 2)
    assert says in line


def test_help_exits_0() -> None:
    done = raw_weft("--help", timeout=30)
    assert done.returncode == 0
    for command in ("start", "signal", "cancel", "terminate", "describe", "history", "list",
                    "register", "runner", "decider"):  # fmt: skip
        assert command in done.stdout
    done = raw_weft("start", "--help", timeout=30)
    assert done.returncode == 0
    assert "--address" in done.stdout and "--wait" in done.stdout


# -- the server is unreachable ---------------------------------------------------------

CLIENT_COMMANDS = {
    "start": ["start", "t", "--task-list", "tl"],
    "start-wait": ["start", "t", "--task-list", "tl", "--wait"],
    "signal": ["signal", "wf", "go"],
    "cancel": ["cancel", "wf"],
    "terminate": ["terminate", "wf", "--reason", "r"],
    "describe": ["describe", "wf"],
    "describe-json": ["describe", "wf", "--json"],
    "history": ["history", "wf"],
    "history-follow": ["history", "wf", "--follow"],
    "list": ["list"],
    "list-json": ["list", "--json"],
    "register": ["register", "REGISTER_FILE"],
}


@pytest.fixture(scope="module")
def unreachable(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every client command run once against a port nothing listens on (in
    parallel: each spends its couple of seconds of retries waiting)."""
    good = tmp_path_factory.mktemp("unreachable") / "good.yaml"
    good.write_text("name: anything\ntask_list: tl\nsteps:\n  - return done\n")
    address = unreachable_address()
    commands = [
        argv(args[0], address, *[str(good) if a == "REGISTER_FILE" else a for a in args[1:]])
        for args in CLIENT_COMMANDS.values()
    ]
    commands.append(argv("describe", "127.0.0.1:99999", "wf"))
    results = run_all(commands, timeout=60)
    return dict(zip([*CLIENT_COMMANDS, "bad-port"], results, strict=True))


@pytest.mark.parametrize("case", list(CLIENT_COMMANDS), ids=list(CLIENT_COMMANDS))
def test_unreachable_server_exits_4_in_one_line(
    case: str, unreachable: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    done = unreachable[case]
    line = error_line(done, CLIENT_COMMANDS[case][0], 4)
    assert "cannot reach a Weft server at 127.0.0.1:" in line


def test_unreachable_server_prints_nothing_on_stdout(
    unreachable: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    noisy = {
        case: done.stdout
        for case, done in unreachable.items()
        if done.stdout and case in CLIENT_COMMANDS
    }
    assert noisy == {}


async def test_start_wait_json_whose_server_goes_away_still_says_which_run(
    tmp_path: Path,
) -> None:
    """The run started, then its server went while the command waited: stdout
    still names the run (its status unknown: null), stderr says why, exit 4."""
    node = ServerProcess(f"sqlite:///{tmp_path}/weft.db", tmp_path, name="goes-away")
    wid = unique("cli-gone")
    args = ["cli-idle", "--id", wid, "--task-list", unique("idle"), "--wait", "--json"]
    try:
        await node.start()
        waiting = spawn(argv("start", node.address, *args))
        try:

            async def started() -> bool:
                done = await asyncio.to_thread(weft, "describe", wid, address=node.address)
                return done.returncode == 0

            await wait_until(started, timeout=30, interval=0.1)
            await node.terminate()  # (it drains: the start's answer is not cut off)
            out, err = await asyncio.to_thread(waiting.communicate, timeout=60)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.communicate()
    finally:
        node.stop()
    line = error_line(
        subprocess.CompletedProcess(waiting.args, waiting.returncode, out, err), "start", 4
    )
    doc = json.loads(out)
    assert (doc["workflow_id"], doc["status"]) == (wid, None), doc
    assert doc["run_id"] and line == f"weft start: {doc['waited']}", doc


def test_an_out_of_range_port_is_a_usage_error(
    unreachable: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    error_line(unreachable["bad-port"], "describe", 2)


# A Ctrl-C that lands while the commands load: the hook sends it as the import
# of one of them begins (deterministic, where a timer would race the load).
_INTERRUPTED_IMPORT = """
import os, signal, sys

class Interrupt:
    def find_spec(self, name, path, target=None):
        if name == "cli.workflow_cmds":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupt())
sys.argv = ["weft", "list"]
from cli import main
main()
"""


def test_a_ctrl_c_while_the_commands_load_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_IMPORT],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert (done.returncode, done.stderr) == (130, "weft: interrupted\n")


def test_a_peer_that_accepts_and_says_nothing_is_unreachable_within_seconds() -> None:
    """A port that takes connections and never speaks HTTP/2 (a hung process, a
    wrong service): exit 4 once the connect timeout passes (5 s; gRPC's own 20 s
    held the command 22 s)."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.listen(16)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        began = time.monotonic()
        done = subprocess.run(
            argv("describe", address, "wf"), capture_output=True, text=True, timeout=60
        )
        took = time.monotonic() - began
    line = error_line(done, "describe", 4)
    assert "cannot reach a Weft server at" in line
    assert took < 15, took

"""Run the real `weft` console script as a subprocess and check what it prints.

Every call passes `--address` explicitly and runs with the `WEFT_*` variables
of the calling environment removed, so a developer's settings cannot leak in.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tests.serverproc import WEFT, free_port

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}


def argv(command: str, address: str | None, *args: str) -> list[str]:
    """`weft COMMAND [--address A] ARGS…` (the option right after the command, so
    it can never be swallowed by an option that takes a value)."""
    out = [str(WEFT), command]
    if address is not None:
        out += ["--address", address]
    return [*out, *args]


def weft(
    command: str,
    *args: str,
    address: str | None,
    timeout: float = 60,
    cwd: Path = REPO,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv(command, address, *args),
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=cwd,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def raw_weft(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`weft ARGS…` with nothing added (for errors before any command is chosen)."""
    return subprocess.run(
        [str(WEFT), *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=REPO,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def show(done: subprocess.CompletedProcess[str]) -> str:
    cmd = " ".join(done.args[1:]) if isinstance(done.args, list) else str(done.args)
    return (
        f"weft {cmd}\n-> exit {done.returncode}\n"
        f"--- stdout ---\n{done.stdout}--- stderr ---\n{done.stderr}"
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    """A successful client command: exit 0, nothing on stderr; returns stdout."""
    assert done.returncode == 0, show(done)
    assert done.stderr == "", show(done)
    return done.stdout


def ok_json(done: subprocess.CompletedProcess[str]) -> Any:
    """A successful `--json` command: stdout is exactly one JSON document."""
    return json.loads(ok(done))


def error_line(done: subprocess.CompletedProcess[str], command: str, code: int) -> str:
    """The command failed with `code` and said so in exactly one line on stderr,
    `weft COMMAND: …`, without a traceback; returns that line."""
    assert done.returncode == code, show(done)
    assert "Traceback" not in done.stderr, show(done)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr\n{show(done)}"
    prefix = f"weft {command}:" if command else "weft:"
    assert lines[0].startswith(prefix), show(done)
    assert lines[0].strip() != prefix, f"an empty message\n{show(done)}"
    return lines[0]


def unreachable_address() -> str:
    """A local port nothing listens on."""
    return f"127.0.0.1:{free_port()}"


def spawn(cmd: list[str]) -> subprocess.Popen[str]:
    """`weft` argv started in the background, its output piped, its stdin closed."""
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
        cwd=REPO,
    )


def run_all(
    commands: Sequence[list[str]], timeout: float = 60
) -> list[subprocess.CompletedProcess[str]]:
    """Run several `weft` argv lists at once (they mostly wait), in parallel."""
    procs = [spawn(cmd) for cmd in commands]
    results = []
    try:
        for cmd, proc in zip(commands, procs, strict=True):
            out, err = proc.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(cmd, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return results


def eventually(check: Callable[[], T | None], timeout: float = 20, interval: float = 0.1) -> T:
    """For sync fixtures (tests use `tests.helpers.wait_until`): poll `check` until
    it returns something truthy, within a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")
        time.sleep(interval)

"""`bench.hotpath --census`: a real process with its loop instrumented counts
what its loop did between SIGUSR1 and SIGUSR2, and nothing before."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import hotpath, loop_census
from bench.processes import REPO

# Warms up (work SIGUSR1 must drop), says it is ready, then on "go" creates
# three tasks that each wake the loop through a socket and one timer.
PROGRAM = """
import asyncio, signal, socket, sys
from pathlib import Path
from bench import loop_census

loop_census.install(Path(sys.argv[1]))
reset = signal.getsignal(signal.SIGUSR1)

def reset_and_say(*args):
    reset(*args)
    print("reset", flush=True)

signal.signal(signal.SIGUSR1, reset_and_say)

async def through_socket():
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    woken = loop.create_future()
    def on_readable():
        loop.remove_reader(ours.fileno())
        woken.set_result(None)
    loop.add_reader(ours.fileno(), on_readable)
    loop.call_later(0.01, theirs.send, b"x")
    await woken
    ours.close(); theirs.close()

async def main():
    for _ in range(5):
        await asyncio.create_task(asyncio.sleep(0))
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for _ in range(3):
        await asyncio.create_task(through_socket())
    print("done", flush=True)
    await asyncio.sleep(30)

asyncio.run(main())
"""


def _until(path: Path, proc: subprocess.Popen[str]) -> dict[str, object]:
    deadline = time.monotonic() + 10
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, f"no census in {path}"
        time.sleep(0.05)
    counts: dict[str, object] = json.loads(path.read_text())
    return counts


def test_a_process_counts_its_loop_between_the_two_signals(tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(tmp_path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline().strip() == "ready"
            os.kill(proc.pid, signal.SIGUSR1)
            assert proc.stdout.readline().strip() == "reset"
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "done"
            os.kill(proc.pid, signal.SIGUSR2)
            census = _until(tmp_path / f"census.{proc.pid}.json", proc)
        finally:
            proc.kill()
    tasks = census["tasks"]
    assert isinstance(tasks, dict)
    assert tasks == {"through_socket": 3}, tasks  # (the warm-up's sleeps were dropped)
    woken_by = census["woken_by"]
    assert isinstance(woken_by, dict)
    assert woken_by.get("through_socket.<locals>.on_readable") == 3, woken_by
    callbacks = census["callbacks"]
    assert isinstance(callbacks, dict)
    assert callbacks.get("through_socket.<locals>.on_readable") == 3, callbacks
    selects, waits = census["selects"], census["waits"]
    assert isinstance(selects, int) and isinstance(waits, int)
    assert selects >= waits >= 3  # (each socket's wake-up came to an idle loop)


def test_the_census_reads_per_activity_largest_first() -> None:
    lines = hotpath.render_census(
        {
            "selects": 300,
            "waits": 100,
            "woken_by": {"a": 200, "b": 100},
            "callbacks": {f"c{i}": 10 * (i + 1) for i in range(12)},
            "tasks": {"t": 50},
            "file": "/tmp/x.json",
        },
        100,
        "server",
    )
    text = "\n".join(lines)
    assert "the server's event loop per activity" in text
    rows = {line.split()[0]: line.split()[-1] for line in lines if line.startswith("    ")}
    assert rows["a"] == "2.00" and rows["b"] == "1.00" and rows["t"] == "0.50"
    assert rows["c11"] == "1.20" and "c0" not in rows and "c1" not in rows
    assert rows["(the"] == "0.30"  # (the two smallest callbacks, together)
    named = [line.split()[0] for line in lines if line.startswith("    c")]
    assert named[:2] == ["c11", "c10"]


@pytest.mark.parametrize("args", [["--census", "--py-spy"], ["--census", "decider", "--embed"]])
def test_the_census_is_one_instrument_at_a_time(args: list[str]) -> None:
    with pytest.raises(SystemExit):
        hotpath.main(args)


def test_a_census_that_cannot_be_written_is_said_not_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loop_census._write_or_say(loop_census.Census(), tmp_path / "gone")
    assert "could not write the census" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_launcher_wants_a_directory_and_the_weft_command() -> None:
    with pytest.raises(SystemExit, match="usage"):
        loop_census.main(["/tmp", "server"])

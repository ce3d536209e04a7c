"""`--event-loop` / `WEFT_EVENT_LOOP` of `weft server`, `weft runner` and `weft
decider` (`sdk.event_loops`): real processes run on uvloop unless told
otherwise and say which loop they run on; a node on uvloop serves its direct
lanes; a loop that is unknown, or not installed, is refused in one line with
exit 2 before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sdk import AsyncClient
from sdk.api.weft.v1 import service_pb2 as s
from tests.cli.support import REPO, argv, clean_env, error_line
from tests.helpers import unique, wait_until
from tests.serverproc import ServerProcess
from tests.workerproc import WorkerProcess


def logged(path: Path, event: str) -> dict[str, object] | None:
    """The first JSON log line of `event` in the file, if any yet."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        if line.startswith("{") and f'"{event}"' in line:
            entry: dict[str, object] = json.loads(line)
            return entry
    return None


def test_the_server_runs_on_uvloop_by_default(server: ServerProcess) -> None:
    started = logged(server.log_path, "server.started")
    assert started is not None, server.log_path.read_text()
    assert started["event_loop"] == "uvloop"


@pytest.mark.parametrize(
    ("args", "env", "loop"),
    [
        ((), {}, "uvloop"),
        (("--event-loop", "asyncio"), {}, "asyncio"),
        ((), {"WEFT_EVENT_LOOP": "asyncio"}, "asyncio"),
        (("--event-loop", "uvloop"), {"WEFT_EVENT_LOOP": "asyncio"}, "uvloop"),
    ],
    ids=["default", "flag", "environment", "flag-over-environment"],
)
async def test_a_runner_runs_on_the_loop_it_is_given(
    args: tuple[str, ...], env: dict[str, str], loop: str, address: str, tmp_path: Path
) -> None:
    runner = WorkerProcess(
        "runner",
        [*args, "--task-list", unique("loop"), "examples.order"],
        address,
        tmp_path,
        "loop-runner",
        env,
    ).start()
    try:

        async def started() -> bool:
            assert runner.running, runner.log_tail()
            return logged(runner.log_path, "worker.started") is not None

        await wait_until(started, timeout=30)
        entry = logged(runner.log_path, "worker.started")
        assert entry is not None and entry["event_loop"] == loop, runner.log_tail()
    finally:
        runner.stop()


async def test_a_node_on_uvloop_answers_on_its_direct_lanes(address: str) -> None:
    """The client here runs on asyncio's loop; the node (a `weft server`
    process) on uvloop, whose transports are not asyncio's classes."""
    async with AsyncClient(address) as client:
        await client.placement()
        assert client._lanes is not None
        direct = client._lanes.direct
        assert direct is not None, "the node offered no direct lanes"
        poll = s.PollForActivityTaskRequest(task_list=unique("idle"), identity="loop-test")
        answer = await client.rpc("PollForActivityTask", poll, timeout=None)
        assert not answer.task_token  # (answered on the direct lane, empty: none queued)
        assert client._lanes.direct is direct, "the direct lane was given up"
        assert direct.idle == 1  # (its connection kept for the next call)


def _weft(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv(*args[:1], None, *args[1:]),
        capture_output=True,
        text=True,
        env=clean_env() | (env or {}),
        cwd=REPO,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("command", ["server", "runner", "decider"])
def test_an_unknown_event_loop_exits_2_in_one_line(command: str, tmp_path: Path) -> None:
    args = ["--db", f"sqlite:///{tmp_path}/x.db"] if command == "server" else ["--task-list", "t"]
    for done in (
        _weft(command, *args, "--event-loop", "trio"),
        _weft(command, *args, env={"WEFT_EVENT_LOOP": "trio"}),
    ):
        line = error_line(done, command, 2)
        assert "'trio' is not one of 'auto', 'uvloop', 'asyncio'" in line, line


@pytest.mark.parametrize("command", ["server", "runner", "decider"])
def test_uvloop_where_it_is_not_installed_exits_2(command: str, tmp_path: Path) -> None:
    # A uvloop that does not import, ahead of the installed one on the path.
    shadow = tmp_path / "shadow" / "uvloop"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no uvloop on this machine')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")])}
    db = f"sqlite:///{tmp_path}/x.db"
    args = ["--db", db, "--listen", "127.0.0.1:0"] if command == "server" else ["--task-list", "t"]
    done = _weft(command, *args, "--event-loop", "uvloop", env=env)
    line = error_line(done, command, 2)
    assert "uvloop event loop is not installed" in line, line

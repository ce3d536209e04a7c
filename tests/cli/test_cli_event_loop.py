"""`--event-loop` / `WEFT_EVENT_LOOP` of `weft server`, `weft runner` and `weft
decider` (`sdk.event_loops`): `weft server` runs on uvloop unless told otherwise
(or it embeds workers), the worker processes on asyncio's loop, and each says
which loop it runs on; a node on uvloop serves its direct lanes; a loop that is
unknown, or not installed, is refused in one line with exit 2 before anything
starts."""

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


@pytest.mark.parametrize("kind", ["runner", "decider"])
@pytest.mark.parametrize(
    ("args", "env", "loop"),
    [
        ((), {}, "asyncio"),
        (("--event-loop", "uvloop"), {}, "uvloop"),
        ((), {"WEFT_EVENT_LOOP": "auto"}, "uvloop"),
        (("--event-loop", "asyncio"), {"WEFT_EVENT_LOOP": "uvloop"}, "asyncio"),
    ],
    ids=["default", "flag", "environment", "flag-over-environment"],
)
async def test_a_worker_process_runs_on_the_loop_it_is_given(
    kind: str,
    args: tuple[str, ...],
    env: dict[str, str],
    loop: str,
    address: str,
    tmp_path: Path,
) -> None:
    worker = WorkerProcess(
        kind,
        [*args, "--task-list", unique("loop"), "examples.order"],
        address,
        tmp_path,
        "loop-worker",
        env,
    ).start()
    try:

        async def started() -> bool:
            assert worker.running, worker.log_tail()
            return logged(worker.log_path, "worker.started") is not None

        await wait_until(started, timeout=30)
        entry = logged(worker.log_path, "worker.started")
        assert entry is not None and entry["event_loop"] == loop, worker.log_tail()
    finally:
        worker.stop()


async def test_a_node_on_uvloop_answers_on_its_direct_lanes(server: ServerProcess) -> None:
    """The client here runs on asyncio's loop; the node (a `weft server`
    process) on uvloop, whose transports are not asyncio's classes."""
    started = logged(server.log_path, "server.started")
    assert started is not None and started["event_loop"] == "uvloop"
    async with AsyncClient(server.address) as client:
        await client.placement()
        assert client._lanes is not None
        direct = client._lanes.direct
        assert direct is not None, "the node offered no direct lanes"
        poll = s.PollForActivityTaskRequest(task_list=unique("idle"), identity="loop-test")
        answer = await client.rpc("PollForActivityTask", poll, timeout=None)
        assert not answer.task_token  # (answered on the direct lane, empty: none queued)
        assert client._lanes.direct is direct, "the direct lane was given up"
        assert direct.idle == 1  # (its connection kept for the next call)


async def test_a_server_that_embeds_workers_runs_them_on_asyncios_loop(tmp_path: Path) -> None:
    """Unless told otherwise: the embedded activities are the user's code."""
    for args, loop in (((), "asyncio"), (("--event-loop", "uvloop"), "uvloop")):
        node = ServerProcess(
            f"sqlite:///{tmp_path}/{loop}.db",
            tmp_path,
            name=f"embed-{loop}",
            extra_args=("--embed", "examples.order", *args),
        )
        await node.start()
        try:
            started = logged(node.log_path, "server.started")
            assert started is not None and started["event_loop"] == loop, node.log_path
        finally:
            node.stop()


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

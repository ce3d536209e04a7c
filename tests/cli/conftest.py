"""One real `weft server` (SQLite file) for the whole CLI suite, plus one
`weft decider` process running `cli_flow.py` on a task list of its own."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.processes import stop
from tests.cli.support import REPO, argv, clean_env
from tests.helpers import unique
from tests.serverproc import ServerProcess

CLI_FLOW = Path(__file__).with_name("cli_flow.py")


@pytest.fixture(scope="session")
def cli_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("weft-cli")


@pytest.fixture(scope="session")
def server(cli_dir: Path) -> Iterator[ServerProcess]:
    node = ServerProcess(f"sqlite:///{cli_dir}/weft.db", cli_dir, name="cli-server")
    try:
        asyncio.run(node.start())
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def address(server: ServerProcess) -> str:
    return server.address


@pytest.fixture(scope="session")
def flow_task_list(address: str, cli_dir: Path) -> Iterator[str]:
    """The task list of a running `weft decider cli_flow.py` process."""
    task_list = unique("cli-flow")
    log_path = cli_dir / "cli-flow-decider.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv("decider", address, "--task-list", task_list, str(CLI_FLOW)),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while b'"worker.started"' not in log_path.read_bytes():
            assert proc.poll() is None, log_path.read_text(errors="replace")
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")
            time.sleep(0.05)
        yield task_list
    finally:
        stop(proc)


@pytest.fixture
def idle_task_list() -> str:
    """A task list no decider polls: its runs stay open until told otherwise."""
    return unique("idle")

"""A worker whose server is out of reach waits for it without end, and says so:
once, at info, after `SAY_AWAY_AFTER` (sdk.reachability), and once more when
it is back (each retry is only a debug line, so before, an operator saw
nothing at all); once for the worker, not once for each of its connections."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.helpers import wait_until
from tests.serverproc import ServerProcess
from tests.workerproc import WorkerProcess


async def test_a_runner_says_its_server_is_away_and_back(
    sqlite_url: str, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    node = ServerProcess(sqlite_url, tmp_path)  # (its port chosen, nothing on it yet)
    runner = WorkerProcess(
        "runner", ["--task-list", "tl", "examples.order"], node.address, tmp_path, "runner"
    ).start()
    workers.append(runner)

    def said(event: str) -> int:
        assert runner.running, runner.log_tail()
        return runner.log().count(f'"event": "server.{event}"')

    async def away() -> bool:
        return said("unreachable") == 1

    await wait_until(away, timeout=30)
    await node.start()
    try:

        async def back() -> bool:
            return said("reachable") == 1

        await wait_until(back, timeout=30)
        assert said("unreachable") == 1  # once for the outage, not once per call
        assert node.address in runner.log()
        # Away again while polling, over its session's and its polls' connections:
        # said once more for the worker, not once for each connection.
        node.kill9()

        async def away_again() -> bool:
            return said("unreachable") == 2

        await wait_until(away_again, timeout=30)
        await asyncio.sleep(3)
        assert said("unreachable") == 2, runner.log_tail()
    finally:
        node.stop()

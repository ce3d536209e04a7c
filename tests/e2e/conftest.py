"""Fixtures of the end-to-end tests that run Weft as real processes: a `weft
server` subprocess (`node`, on each database of `db_url`) and the worker
processes a test starts (`workers`, stopped when the test ends)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.serverproc import ServerProcess
from tests.workerproc import WorkerProcess


@pytest.fixture
async def node(db_url: str, tmp_path: Path) -> AsyncIterator[ServerProcess]:
    proc = ServerProcess(db_url, tmp_path, name="server", long_poll="2s")
    await proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()

"""On SQLite, as on PostgreSQL (`test_group_commit`): a write whose client goes
away (cancels its call) while it runs lands once, the handler sees it through
before it raises its cancellation, and the run goes on from it. The SQLite
write runs in the task `pending.drive` gives it, with no second task around
each attempt: a client's cancellation must still not reach it."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import Any

import pytest

from orchestrator.server import Server
from orchestrator.store import sqlite_writer
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, wait_until
from tests.store.gone_clients import SeenThrough, signal, signals


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """(conftest's `server` and `stub` on SQLite)"""
    return sqlite_url


async def test_a_write_whose_client_went_away_lands_once_and_the_run_goes_on(
    server: Server, stub: sg.WorkflowServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Driver(stub)
    await run.start()
    reached, gate = threading.Event(), threading.Event()
    transact = sqlite_writer._transact

    def held(db: sqlite3.Connection, steps: Any, *, compare_and_set: bool) -> bool:
        if not reached.is_set():  # (the first write only: the signal's)
            reached.set()
            gate.wait(10)
        return transact(db, steps, compare_and_set=compare_and_set)

    monkeypatch.setattr(sqlite_writer, "_transact", held)
    seen = SeenThrough(monkeypatch)
    call = stub.SignalWorkflow(
        s.SignalWorkflowRequest(
            namespace="default",
            execution=c.WorkflowExecution(workflow_id=run.workflow_id),
            signal_name="gone",
        )
    )
    try:
        await wait_until(lambda: _now(reached.is_set()))
        call.cancel()  # the client goes away while the write is held
        with pytest.raises(asyncio.CancelledError):
            await call
        # The server's handler is cancelled while the write is still held.
        await wait_until(seen.handler_cancelled)
    finally:
        gate.set()
    await wait_until(lambda: signals(run, "gone"))
    await signal(stub, run, "after")  # on top of it: the node's copy of the run agrees
    assert await signals(run, "gone") == 1
    assert await signals(run, "after") == 1
    assert seen.cancelled[0] is True  # the handler was cancelled, and saw the write through


async def _now(value: bool) -> bool:
    return value

"""After the connection is lost during a transition's call, the PostgreSQL
writer decides whether the call committed. It must say yes for a write that
landed even when other writers have moved the run on since (answering no
would apply the command a second time), say no for one that did not, and
first end the backend that ran the call so that it cannot commit later."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import psycopg
import pytest

from orchestrator.config import ServerConfig
from orchestrator.server import Server
from orchestrator.store.pending import Pending
from orchestrator.store.pg_writer import PgWriter
from orchestrator.store.writes import RunWrite
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, payload


@pytest.fixture
async def pg_server(postgres_url: str) -> AsyncIterator[Server]:
    node = Server(ServerConfig(db_url=postgres_url, listen="127.0.0.1:0", long_poll=3.0))
    await node.start()
    yield node
    await node.stop(grace=0.5)


def _writer(node: Server) -> tuple[PgWriter, list[RunWrite]]:
    """The node's hot-path writer, recording each write it is given."""
    assert node._store is not None
    hot = node._store._hot
    assert isinstance(hot, PgWriter)
    seen: list[RunWrite] = []
    real = hot.submit

    def recording(w: RunWrite, links: tuple[str, str, str] = ("", "", "")) -> Pending[bool]:
        seen.append(w)
        return real(w, links)

    hot.submit = recording  # type: ignore[method-assign]
    return hot, seen


async def _backend(url: str) -> tuple[psycopg.AsyncConnection[Any], int]:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    return conn, conn.info.backend_pid


async def test_a_landed_write_is_known_after_the_run_moved_on(
    pg_server: Server, postgres_url: str
) -> None:
    hot, seen = _writer(pg_server)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{pg_server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        wf = Driver(stub)
        await wf.start()
        signal = s.SignalWorkflowRequest(
            namespace="default",
            execution=c.WorkflowExecution(workflow_id=wf.workflow_id),
            signal_name="first",
            input=payload(1),
        )
        await stub.SignalWorkflow(signal)
        first = next(w for w in seen if w.events and w.events[0].type == "Signal")
        # Another writer moves the run on: the version is no longer first's + 1.
        signal.signal_name = "second"
        await stub.SignalWorkflow(signal)
        assert len(await wf.history()) > first.events[-1].event_id

    events = [e.SerializeToString() for e in first.events]
    conn, pid = await _backend(postgres_url)
    try:
        assert await hot._landed(first, events, pid)
        assert conn.closed or (await _gone(conn)), "the cut-off call's backend was not ended"
        # A write of the same event id that did not land is told apart, byte by byte.
        other = [events[0].replace(b"first", b"other")]
        conn2, pid2 = await _backend(postgres_url)
        assert not await hot._landed(first, other, pid2)
        await conn2.close()
    finally:
        await conn.close()


async def _gone(conn: psycopg.AsyncConnection[Any]) -> bool:
    try:
        await conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False

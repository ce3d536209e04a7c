"""Group commit on PostgreSQL: a write that finds every committer busy waits,
and the next committer to come free commits everything waiting as one
transaction in one round trip. Each write must still get its own outcome: a
group that fails wrote nothing and its writes are done again one by one, and a
group cut off while it committed must not be written twice (a signal recorded
twice is a lost guarantee, not a slow one)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import psycopg
import pytest

from orchestrator.config import ServerConfig
from orchestrator.server import Server
from orchestrator.store import pg_calls, pg_writer
from orchestrator.store.rows import DbStats
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, payload

RUNS = 12


@pytest.fixture
async def pg_server(postgres_url: str) -> AsyncIterator[Server]:
    node = Server(ServerConfig(db_url=postgres_url, listen="127.0.0.1:0", long_poll=3.0))
    await node.start()
    yield node
    await node.stop(grace=0.5)


@pytest.fixture
async def stub(pg_server: Server) -> AsyncIterator[sg.WorkflowServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{pg_server.port}") as channel:
        yield sg.WorkflowServiceStub(channel)


def _stats(node: Server) -> DbStats:
    assert node._store is not None
    return node._store.stats


def _one_committer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write but the first waits, so that the waiting ones go as a group."""
    monkeypatch.setattr(pg_writer, "COMMITTERS", 1)


async def _signal_all(stub: sg.WorkflowServiceStub, runs: Sequence[Driver], name: str) -> None:
    await asyncio.gather(
        *(
            stub.SignalWorkflow(
                s.SignalWorkflowRequest(
                    namespace="default",
                    execution=c.WorkflowExecution(workflow_id=run.workflow_id),
                    signal_name=name,
                    input=payload(run.workflow_id),
                )
            )
            for run in runs
        )
    )


async def _signals(run: Driver, name: str) -> int:
    return sum(
        1 for e in await run.history() if e.HasField("signal") and e.signal.signal_name == name
    )


async def _started(stub: sg.WorkflowServiceStub, count: int) -> list[Driver]:
    runs = [Driver(stub) for _ in range(count)]
    await asyncio.gather(*(run.start() for run in runs))
    return runs


async def test_waiting_writes_commit_together_each_with_its_own_outcome(
    pg_server: Server, stub: sg.WorkflowServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    _one_committer(monkeypatch)
    stats = _stats(pg_server)
    before = (stats.statements, stats.transactions)
    runs = [Driver(stub) for _ in range(RUNS)]
    twin = Driver(stub)
    twin.workflow_id = runs[0].workflow_id  # the same open workflow id: one must be refused
    outcomes = await asyncio.gather(*(run.start() for run in [*runs, twin]), return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert [o.code() for o in refused] == [grpc.StatusCode.ALREADY_EXISTS], outcomes
    assert all(isinstance(o, str) and o for o in outcomes if o not in refused)
    statements, transactions = stats.statements - before[0], stats.transactions - before[1]
    assert transactions < statements, "no writes were committed together"

    await _signal_all(stub, runs[1:], "go")
    for run in runs[1:]:
        assert await _signals(run, "go") == 1


async def test_a_group_that_fails_is_written_again_one_by_one(
    pg_server: Server, stub: sg.WorkflowServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database error in a group (here the one a failover gives) undoes the
    whole group; each write is then done alone, once."""
    runs = await _started(stub, RUNS)
    _one_committer(monkeypatch)
    groups: list[int] = []

    async def failing(
        conn: psycopg.AsyncConnection[Any],
        calls: Sequence[tuple[bytes, pg_calls.Encoded]],
        first: bytes = b"",
    ) -> list[bool]:
        groups.append(len(calls))
        raise psycopg.errors.ReadOnlySqlTransaction("cannot execute in a read-only transaction")

    monkeypatch.setattr(pg_calls, "call_all", failing)
    await _signal_all(stub, runs, "go")
    assert groups and max(groups) > 1
    for run in runs:
        assert await _signals(run, "go") == 1


@pytest.mark.parametrize("committed", [True, False], ids=["after-commit", "before-commit"])
async def test_a_group_cut_off_is_neither_lost_nor_written_twice(
    pg_server: Server,
    stub: sg.WorkflowServiceStub,
    monkeypatch: pytest.MonkeyPatch,
    committed: bool,
) -> None:
    """The connection is lost during the group's call, once its commit went
    through and once before it was sent: each write must be found where it
    landed and done alone where it did not, so that each signal is in its
    run's history exactly once."""
    runs = await _started(stub, RUNS)
    _one_committer(monkeypatch)
    real = pg_calls.call_all
    groups: list[int] = []

    async def cut_off(
        conn: psycopg.AsyncConnection[Any],
        calls: Sequence[tuple[bytes, pg_calls.Encoded]],
        first: bytes = b"",
    ) -> list[bool]:
        groups.append(len(calls))
        if committed:
            await real(conn, calls, first=first)
        raise psycopg.OperationalError("server closed the connection unexpectedly (test)")

    monkeypatch.setattr(pg_calls, "call_all", cut_off)
    await _signal_all(stub, runs, "go")
    assert groups and max(groups) > 1
    for run in runs:
        assert await _signals(run, "go") == 1

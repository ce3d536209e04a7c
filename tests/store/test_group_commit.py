"""Group commit on PostgreSQL: a write that finds every committer busy waits,
and the next committer to come free commits everything waiting as one
transaction in one round trip. Each write must still get its own outcome: a
group that fails wrote nothing and its writes are done again one by one, and a
group cut off while it committed must not be written twice (a signal recorded
twice is a lost guarantee, not a slow one)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

import grpc
import psycopg
import pytest
from sqlalchemy.engine import make_url

from orchestrator.config import ServerConfig
from orchestrator.server import Server
from orchestrator.store import pg_calls, pg_writer
from orchestrator.store.notices import read_tasks_added
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, wait_until
from tests.pg_proxy import cutting_proxy
from tests.store.gone_clients import SeenThrough, signal, signals

RUNS = 12


@pytest.fixture
def db_url(postgres_url: str) -> str:
    """PostgreSQL only (conftest's `server` and `stub` run on it): SQLite has one
    writer, and no groups."""
    return postgres_url


def _writer(node: Server) -> pg_writer.PgWriter:
    assert node._store is not None
    hot = node._store._hot
    assert isinstance(hot, pg_writer.PgWriter)
    return hot


class Grouping:
    """One committer, whose first write (alone) is held until the writes
    after it have queued: so that those go as one group, every time."""

    def __init__(self, hot: pg_writer.PgWriter, monkeypatch: pytest.MonkeyPatch) -> None:
        self.hot = hot
        self.reached, self.gate = asyncio.Event(), asyncio.Event()
        self.groups: list[int] = []
        monkeypatch.setattr(pg_writer, "COMMITTERS", 1)
        call, call_all = pg_calls.call, pg_calls.call_all

        async def held(conn: psycopg.AsyncConnection[Any], name: bytes, params: Any) -> bool:
            if not self.reached.is_set():
                self.reached.set()
                await self.gate.wait()
            return await call(conn, name, params)

        async def counted(
            conn: psycopg.AsyncConnection[Any], calls: Sequence[tuple[bytes, pg_calls.Encoded]]
        ) -> list[bool]:
            self.groups.append(len(calls))
            return await self.group(conn, calls, call_all)

        monkeypatch.setattr(pg_calls, "call", held)
        monkeypatch.setattr(pg_calls, "call_all", counted)

    async def group(
        self,
        conn: psycopg.AsyncConnection[Any],
        calls: Sequence[tuple[bytes, pg_calls.Encoded]],
        real: Any,
    ) -> list[bool]:
        """What a group's call does: the real one (a test may make it fail)."""
        result: list[bool] = await real(conn, calls)
        return result

    async def run(self, first: Awaitable[Any], rest: Sequence[Awaitable[Any]]) -> list[Any]:
        """`first` (held), then `rest` as one group once all of them wait."""
        held = asyncio.ensure_future(first)
        await asyncio.wait_for(self.reached.wait(), 10)
        others = [asyncio.ensure_future(other) for other in rest]
        await wait_until(lambda: _now(len(self.hot._queue) == len(others)))
        self.gate.set()
        done = await asyncio.gather(held, *others, return_exceptions=True)
        assert self.groups == [len(others)], self.groups
        return done[1:]


async def _now(value: bool) -> bool:
    return value


async def _started(stub: sg.WorkflowServiceStub, count: int) -> list[Driver]:
    runs = [Driver(stub) for _ in range(count)]
    await asyncio.gather(*(run.start() for run in runs))
    return runs


async def test_waiting_writes_commit_together_each_with_its_own_outcome(
    server: Server, stub: sg.WorkflowServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group of starts that holds two of one workflow id: the group fails on
    the second's unique key, and its writes are done again one by one, so that
    exactly one of the two is refused and every other run is started."""
    grouping = Grouping(_writer(server), monkeypatch)
    runs = [Driver(stub) for _ in range(RUNS)]
    twin = Driver(stub)
    twin.workflow_id = runs[0].workflow_id
    outcomes = await grouping.run(Driver(stub).start(), [run.start() for run in [*runs, twin]])
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert [o.code() for o in refused] == [grpc.StatusCode.ALREADY_EXISTS], outcomes
    assert all(isinstance(o, str) and o for o in outcomes if o not in refused)


async def test_a_group_commits_its_writes_together(
    server: Server, stub: sg.WorkflowServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = await _started(stub, RUNS + 1)
    grouping = Grouping(_writer(server), monkeypatch)
    outcomes = await grouping.run(
        signal(stub, runs[0], "go"), [signal(stub, run, "go") for run in runs[1:]]
    )
    assert outcomes == [None] * RUNS  # (and `run` saw them go as one group)
    for run in runs:
        assert await signals(run, "go") == 1


async def test_a_write_that_waits_alone_keeps_its_own_outcome(
    server: Server, stub: sg.WorkflowServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write queued behind a busy committer with none other is done alone, in
    the committer's own task: its refusal (here, a start of a workflow id whose
    run is open) is its own, and the committer is free again after it."""
    runs = await _started(stub, 2)
    grouping = Grouping(_writer(server), monkeypatch)
    held = asyncio.ensure_future(signal(stub, runs[0], "go"))
    await asyncio.wait_for(grouping.reached.wait(), 10)
    twin = Driver(stub)
    twin.workflow_id = runs[1].workflow_id
    refused = asyncio.ensure_future(twin.start())
    await wait_until(lambda: _now(len(grouping.hot._queue) == 1))
    grouping.gate.set()
    await held
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await refused
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS, info.value
    assert grouping.groups == []  # (alone: not a pipeline)
    await signal(stub, runs[1], "after")
    assert await signals(runs[0], "go") == 1
    assert await signals(runs[1], "after") == 1
    await wait_until(lambda: _now(grouping.hot._busy == 0))


@pytest.mark.parametrize("queued", [False, True], ids=["alone", "queued"])
async def test_a_write_whose_client_went_away_lands_once_and_the_run_goes_on(
    server: Server, stub: sg.WorkflowServiceStub, monkeypatch: pytest.MonkeyPatch, queued: bool
) -> None:
    """A signal's client gives up (its deadline passes) while the signal's write
    is under way, alone or waiting for a committer: the server's handler is
    cancelled, but the write goes on to its end and lands once, and this node's
    copy of the run agrees (the next signal is written on top of it)."""
    runs = await _started(stub, 2)
    grouping = Grouping(_writer(server), monkeypatch)
    seen = SeenThrough(monkeypatch)

    async def gives_up(run: Driver) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.SignalWorkflow(
                s.SignalWorkflowRequest(
                    namespace="default",
                    execution=c.WorkflowExecution(workflow_id=run.workflow_id),
                    signal_name="gone",
                ),
                timeout=0.3,
            )
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

    first = runs[0]
    if queued:  # (the committer is held by another write; this one waits for it)
        held = asyncio.ensure_future(signal(stub, first, "go"))
        await asyncio.wait_for(grouping.reached.wait(), 10)
        gone = asyncio.ensure_future(gives_up(runs[1]))
        await wait_until(lambda: _now(len(grouping.hot._queue) == 1))
        await gone
    else:  # (held itself, at its call)
        gone = asyncio.ensure_future(gives_up(first))
        await asyncio.wait_for(grouping.reached.wait(), 10)
        await gone
    # The server's own deadline comes just after the client's: its handler must
    # be cancelled while the write is still held, or nothing is seen through.
    await wait_until(seen.handler_cancelled)
    grouping.gate.set()
    if queued:
        await held
    run = runs[1] if queued else first
    await wait_until(lambda: signals(run, "gone"))
    await signal(stub, run, "after")
    assert await signals(run, "gone") == 1
    assert await signals(run, "after") == 1
    assert True in seen.cancelled, seen.cancelled  # (the handler was cancelled, and saw it through)


async def test_a_group_that_fails_is_written_again_one_by_one(
    server: Server, stub: sg.WorkflowServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database error in a group (here a serialization failure, which psycopg
    classes as an OperationalError though the connection is fine) undoes the
    whole group; each write is then done alone, once."""
    runs = await _started(stub, RUNS + 1)
    grouping = Grouping(_writer(server), monkeypatch)

    async def failing(conn: Any, calls: Any, real: Any) -> list[bool]:
        raise psycopg.errors.SerializationFailure("could not serialize access (test)")

    grouping.group = failing  # type: ignore[method-assign]
    fenced: list[int] = []

    async def fence(backend: int) -> bool:
        fenced.append(backend)
        return True

    grouping.hot._fenced = fence  # type: ignore[method-assign]
    await grouping.run(signal(stub, runs[0], "go"), [signal(stub, run, "go") for run in runs[1:]])
    assert fenced == [], "a refusal was taken for a lost connection"
    for run in runs:
        assert await signals(run, "go") == 1


async def test_a_write_whose_run_another_node_moved_on_is_done_again(
    server: Server, stub: sg.WorkflowServiceStub, monkeypatch: pytest.MonkeyPatch, postgres_url: str
) -> None:
    """In a group, one write finds its run moved on by another node since this
    node read it: its compare-and-set writes nothing, the group commits the
    others, and that one write is done again on the run as it now is. Every
    signal is in its run's history once, the other node's too."""
    runs = await _started(stub, RUNS + 1)  # (this node holds them, as it wrote them)
    other = Server(ServerConfig(db_url=postgres_url, listen="127.0.0.1:0"))
    await other.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{other.port}") as channel:
            await signal(sg.WorkflowServiceStub(channel), runs[1], "elsewhere")
    finally:
        await other.stop(grace=0.5)
    grouping = Grouping(_writer(server), monkeypatch)
    written: list[list[bool]] = []

    async def noted(conn: Any, calls: Any, real: Any) -> list[bool]:
        result: list[bool] = await real(conn, calls)
        written.append(result)
        return result

    grouping.group = noted  # type: ignore[method-assign]
    outcomes = await grouping.run(
        signal(stub, runs[0], "go"), [signal(stub, run, "go") for run in runs[1:]]
    )
    assert outcomes == [None] * RUNS
    assert [w.count(False) for w in written] == [1], written
    for run in runs:
        assert await signals(run, "go") == 1
    assert await signals(runs[1], "elsewhere") == 1


@pytest.mark.parametrize("committed", [True, False], ids=["after-commit", "before-commit"])
async def test_a_group_cut_off_is_neither_lost_nor_written_twice(
    server: Server,
    stub: sg.WorkflowServiceStub,
    monkeypatch: pytest.MonkeyPatch,
    committed: bool,
) -> None:
    """The connection is lost during the group's call, once its commit went
    through and once before it was sent: each write must be found where it
    landed and done alone where it did not, so that each signal is in its
    run's history exactly once."""
    runs = await _started(stub, RUNS + 1)
    grouping = Grouping(_writer(server), monkeypatch)

    async def cut_off(conn: Any, calls: Any, real: Any) -> list[bool]:
        if committed:
            await real(conn, calls)
        raise psycopg.OperationalError("server closed the connection unexpectedly (test)")

    grouping.group = cut_off  # type: ignore[method-assign]
    await grouping.run(signal(stub, runs[0], "go"), [signal(stub, run, "go") for run in runs[1:]])
    for run in runs:
        assert await signals(run, "go") == 1


async def test_a_group_whose_connection_is_cut_as_it_commits_is_written_once(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on a real connection: between the node and PostgreSQL, a proxy
    closes it as the group's commit is answered (its rows sent, not the
    ReadyForQuery that follows the commit). The node cannot know the outcome:
    it must find each write where it landed and write none twice."""
    direct = make_url(postgres_url)
    with cutting_proxy((direct.host or "127.0.0.1", direct.port or 5432)) as (port, arm):
        # (No SSL or GSS request: the proxy reads PostgreSQL's messages, not theirs.)
        url = direct.set(host="127.0.0.1", port=port).update_query_dict(
            {"sslmode": "disable", "gssencmode": "disable"}
        )
        node = Server(
            ServerConfig(db_url=url.render_as_string(hide_password=False), listen="127.0.0.1:0")
        )
        await node.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
                stub = sg.WorkflowServiceStub(channel)
                runs = await _started(stub, RUNS + 1)
                grouping = Grouping(_writer(node), monkeypatch)
                raised: list[BaseException] = []

                async def noted(conn: Any, calls: Any, real: Any) -> list[bool]:
                    try:
                        result: list[bool] = await real(conn, calls)
                    except BaseException as exc:
                        raised.append(exc)
                        raise
                    return result

                grouping.group = noted  # type: ignore[method-assign]
                arm(RUNS)  # (the group's calls: no other batch of the node's is as long)
                outcomes = await grouping.run(
                    signal(stub, runs[0], "go"), [signal(stub, run, "go") for run in runs[1:]]
                )
                assert outcomes == [None] * RUNS
                assert [type(exc) for exc in raised] == [psycopg.OperationalError], raised
                for run in runs:
                    assert await signals(run, "go") == 1
        finally:
            await node.stop(grace=0.5)


async def test_close_commits_the_writes_still_waiting(
    server: Server, stub: sg.WorkflowServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() returns only once every write waiting or under way, the held one
    and then the group, has been committed."""
    runs = await _started(stub, RUNS + 1)
    hot = _writer(server)
    grouping = Grouping(hot, monkeypatch)
    group_sent, group_gate = asyncio.Event(), asyncio.Event()

    async def held_group(conn: Any, calls: Any, real: Any) -> list[bool]:
        group_sent.set()
        await group_gate.wait()
        result: list[bool] = await real(conn, calls)
        return result

    grouping.group = held_group  # type: ignore[method-assign]
    held = asyncio.ensure_future(signal(stub, runs[0], "go"))
    await asyncio.wait_for(grouping.reached.wait(), 10)
    others = [asyncio.ensure_future(signal(stub, run, "go")) for run in runs[1:]]
    await wait_until(lambda: _now(len(hot._queue) == RUNS))
    closing = asyncio.ensure_future(hot.close())
    grouping.gate.set()
    await asyncio.wait_for(group_sent.wait(), 10)  # the held write is done, the group under way
    await asyncio.sleep(0.2)
    assert not closing.done(), "close() returned with a group under way"
    group_gate.set()
    await asyncio.gather(held, *others)
    await asyncio.wait_for(closing, 10)
    assert grouping.groups == [RUNS]
    for run in runs:
        assert await signals(run, "go") == 1


async def test_a_group_tells_other_nodes_of_every_task_it_adds(
    server: Server,
    stub: sg.WorkflowServiceStub,
    monkeypatch: pytest.MonkeyPatch,
    postgres_url: str,
) -> None:
    """Starts on one task list, with no poller on this node: each adds a task
    row, which other nodes hear of by NOTIFY. PostgreSQL delivers a payload sent
    twice in one transaction once, so the writes of a group must send distinct
    ones: the counts other nodes hear add up to the tasks added."""
    runs = [Driver(stub) for _ in range(RUNS + 1)]
    for run in runs:
        run.task_list = runs[0].task_list
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as listener:
        await listener.execute("LISTEN weft_tasks")
        grouping = Grouping(_writer(server), monkeypatch)
        await grouping.run(runs[0].start(), [run.start() for run in runs[1:]])
        heard = 0
        async for notice in listener.notifies(timeout=5.0):
            _, added, key = read_tasks_added(notice.payload)
            if key.task_list == runs[0].task_list:
                heard += added
            if heard >= len(runs):
                break
    assert heard == len(runs)


async def test_a_node_of_several_processes_writes_alone(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--workers N` (N > 1): each write goes alone (groups made more tasks go
    from process to process through the database)."""
    node = Server(ServerConfig(db_url=postgres_url, listen="127.0.0.1:0", port_processes=2))
    await node.start()
    try:
        hot = _writer(node)
        grouping = Grouping(hot, monkeypatch)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
            stub = sg.WorkflowServiceStub(channel)
            first = asyncio.ensure_future(Driver(stub).start())
            await asyncio.wait_for(grouping.reached.wait(), 10)
            starts = asyncio.gather(*(Driver(stub).start() for _ in range(RUNS)))
            rest = await asyncio.wait_for(starts, 10)  # (grouped, they would wait)
            assert all(rest) and not hot._queue and grouping.groups == []
            grouping.gate.set()
            assert await first
    finally:
        await node.stop(grace=0.5)


async def test_a_close_that_waits_too_long_gives_up_the_waiting_writes(
    server: Server, stub: sg.WorkflowServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database does not answer (here: the one committer is held): close()
    gives up after its wait, the writes still queued are refused UNAVAILABLE,
    and none of them is written."""
    runs = await _started(stub, RUNS + 1)
    hot = _writer(server)
    grouping = Grouping(hot, monkeypatch)
    monkeypatch.setattr(pg_writer, "_CLOSE_WAIT", 0.3)
    held = asyncio.ensure_future(signal(stub, runs[0], "go"))
    await asyncio.wait_for(grouping.reached.wait(), 10)
    others = [asyncio.ensure_future(signal(stub, run, "go")) for run in runs[1:]]
    await wait_until(lambda: _now(len(hot._queue) == RUNS))
    await asyncio.wait_for(hot.close(), 10)
    refused = await asyncio.wait_for(asyncio.gather(*others, return_exceptions=True), 10)
    codes = [o.code() if isinstance(o, grpc.aio.AioRpcError) else o for o in refused]
    assert codes == [grpc.StatusCode.UNAVAILABLE] * RUNS
    assert grouping.groups == []
    grouping.gate.set()
    await held
    assert await signals(runs[0], "go") == 1
    for run in runs[1:]:
        assert await signals(run, "go") == 0

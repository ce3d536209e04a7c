"""What the PostgreSQL connection-loss tests share (test_pg_connection_loss.py,
test_pg_connection_storm.py): the admin connection that terminates the test
database's backends, the server-process fixtures (`admin`, `nodes`, `node`; a test
module takes them by binding those names in its namespace), the log and poller
looks, and the check that a history has nothing missing or doubled."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sdk.api.weft.v1 import history_pb2 as h
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.serverproc import ServerProcess

# Far above every bound of the tests (MAX_RECOVERY, MAX_WAKE_DELAY in
# test_pg_connection_loss.py): a missed wake-up shows as a slow answer.
LONG_POLL = "10s"


# -- the admin side: a connection to the `postgres` database --------------------------


def conninfo(url: str, database: str | None = None) -> str:
    u = make_url(url).set(drivername="postgresql")
    if database is not None:
        u = u.set(database=database)
    return u.render_as_string(hide_password=False)


class Admin:
    """Terminates the backends of one database, from outside it."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], database: str) -> None:
        self.conn = conn
        self.database = database
        self.terminated = 0

    async def terminate_backends(self) -> int:
        """Kill every connection to the test database; returns how many went."""
        cur = await self.conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (self.database,),
        )
        killed = sum(1 for (ok,) in await cur.fetchall() if ok)
        self.terminated += killed
        return killed

    async def now(self) -> datetime:
        cur = await self.conn.execute("SELECT clock_timestamp()")
        row = await cur.fetchone()
        assert row is not None
        value: datetime = row[0]
        return value

    async def listeners_since(self, since: datetime) -> int:
        """Backends opened after `since` whose last statement is the listener's.

        The listener's connection runs `LISTEN weft_tasks`, then `SELECT 1` every
        5 s; pooled connections always run a real statement after their ping.
        """
        cur = await self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = %s AND backend_start > %s"
            " AND (query LIKE 'LISTEN %%' OR query = 'SELECT 1')",
            (self.database, since),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


@pytest.fixture
async def admin(postgres_url: str) -> AsyncIterator[Admin]:
    database = make_url(postgres_url).database
    assert database and database.startswith("weft_t_"), database  # never anyone else's
    conn = await psycopg.AsyncConnection.connect(
        conninfo(postgres_url, "postgres"), autocommit=True
    )
    try:
        yield Admin(conn, database)
    finally:
        await conn.close()


@pytest.fixture
async def nodes(postgres_url: str, tmp_path: Path) -> AsyncIterator[tuple[ServerProcess, ...]]:
    a = ServerProcess(postgres_url, tmp_path, name="node-a", long_poll=LONG_POLL)
    b = ServerProcess(postgres_url, tmp_path, name="node-b", long_poll=LONG_POLL)
    try:
        await asyncio.gather(a.start(), b.start())
        yield a, b
    finally:
        a.stop()
        b.stop()


@pytest.fixture
async def node(postgres_url: str, tmp_path: Path) -> AsyncIterator[ServerProcess]:
    proc = ServerProcess(postgres_url, tmp_path, name="node", long_poll="5s")
    try:
        await proc.start()
        yield proc
    finally:
        proc.stop()


# -- helpers ---------------------------------------------------------------------------


def log_events(proc: ServerProcess, event: str) -> list[dict[str, Any]]:
    """The node's JSON log lines whose event is `event` (all of its starts)."""
    found = []
    for path in sorted(proc.log_dir.glob(f"{proc.name}-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("event") == event:
                found.append(entry)
    return found


async def logged(proc: ServerProcess, event: str) -> bool:
    return bool(log_events(proc, event))


async def poller_waiting(
    stub: sg.WorkflowServiceStub, task_list: str, kind: int, identity: str
) -> bool:
    resp = await stub.DescribeTaskList(
        s.DescribeTaskListRequest(namespace="default", task_list=task_list, kind=kind)
    )
    return any(p.identity == identity for p in resp.pollers)


def attributes(event: h.HistoryEvent) -> Any:
    which = event.WhichOneof("attributes")
    return getattr(event, which) if which else None


def check_history(events: list[h.HistoryEvent]) -> list[str]:
    """Nothing missing, nothing doubled: ids 1..N, one start and one close of the
    workflow, and every task started and closed at most once, after it was scheduled."""
    types = [e.type for e in events]
    assert [e.event_id for e in events] == list(range(1, len(events) + 1)), types
    assert types[0] == "WorkflowStarted", types
    assert types[-1] == "WorkflowSuccess", types
    assert Counter(types)["WorkflowStarted"] == 1, types
    assert Counter(types)["WorkflowSuccess"] == 1, types
    by_id = {e.event_id: e for e in events}
    started: Counter[int] = Counter()
    closed: Counter[int] = Counter()
    for e in events:
        attrs = attributes(e)
        if attrs is None or not hasattr(attrs, "scheduled_event_id"):
            continue
        ref = by_id.get(attrs.scheduled_event_id)
        family = "Decider" if e.type.startswith("Decider") else "Activity"
        assert ref is not None and ref.type == f"{family}Scheduled", (e, types)
        assert ref.event_id < e.event_id, (e, types)
        if e.type.endswith("Started"):
            started[attrs.scheduled_event_id] += 1
        else:
            closed[attrs.scheduled_event_id] += 1
    assert not [k for k, n in started.items() if n > 1], f"a task started twice: {types}"
    assert not [k for k, n in closed.items() if n > 1], f"a task closed twice: {types}"
    activities = [e.event_id for e in events if e.type == "ActivityScheduled"]
    assert all(closed[a] == 1 for a in activities), f"an activity left open: {types}"
    return types

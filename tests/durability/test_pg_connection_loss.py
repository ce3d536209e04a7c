"""PostgreSQL connection loss: every backend of the node's database is killed
with pg_terminate_backend (what a failover, a proxy restart or an idle-session
reaper does), and the nodes must carry on without being restarted.

- The LISTEN connection reconnects and wakes its pollers: a task committed on
  another node still reaches a poller that was waiting through the loss.
- Pooled connections that died are replaced before use (pool_pre_ping) or the
  transaction is retried: the very next RPCs succeed.
- Under a storm of terminations, RPCs fail with UNAVAILABLE only, and retried
  workflows complete with histories that have nothing missing or doubled.
- A poll whose connection dies after its claim committed must not swallow the
  task: it hands it over, or the retried poll finds it.

Each test runs on its own database (the `postgres_url` fixture), and only that
database's backends are terminated: the server is shared with other sessions.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from sqlalchemy.engine import make_url

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, dur, payload, schedule, unique, wait_until
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.postgres

LONG_POLL = "10s"  # far above every bound below: a missed wake-up shows as a slow answer
MAX_RECOVERY = 5.0  # listener loss: the 2 s poll re-check plus a reconnect, with room to spare
MAX_WAKE_DELAY = 1.0  # a hand-over through a working LISTEN connection (as in test_two_nodes)
STORM_SECONDS = 3.0
STORM_EVERY = 0.2
N_STORM_WORKFLOWS = 10
# Short task timeouts in the storm: a task claimed by a poll whose answer was then
# lost (UNAVAILABLE) is handed out again after this instead of the 10 s default.
# (That a poll can lose a task at all is what test 4 pins down; test 3 checks the
# histories stay whole either way and prints how many tasks came back by timeout.)
STORM_TASK_TIMEOUT = 3.0
ACTIVITY_CLOSES = {
    "ActivitySuccess",
    "ActivityFailed",
    "ActivityTimedOut",
    "ActivityScheduledTimeout",
    "ActivityCanceled",
}


# -- the admin side: a connection to the `postgres` database --------------------------


def _conninfo(url: str, database: str | None = None) -> str:
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
        _conninfo(postgres_url, "postgres"), autocommit=True
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


# -- 1. the LISTEN connection is lost ---------------------------------------------------


async def test_poller_on_a_gets_task_started_on_b_after_all_backends_are_killed(
    nodes: tuple[ServerProcess, ...], admin: Admin
) -> None:
    node_a, node_b = nodes
    async with node_a.channel() as chan_a, node_b.channel() as chan_b:
        stub_a, stub_b = sg.WorkflowServiceStub(chan_a), sg.WorkflowServiceStub(chan_b)
        on_a, on_b = Driver(stub_a), Driver(stub_b)
        on_b.task_list, on_b.workflow_id = on_a.task_list, on_a.workflow_id

        poll = asyncio.create_task(on_a.poll_decision())
        await wait_until(
            lambda: poller_waiting(stub_a, on_a.task_list, c.TASK_LIST_KIND_DECISION, "decider-1")
        )
        assert not poll.done(), "the poll answered before there was a task"

        killed_at = await admin.now()
        killed = await admin.terminate_backends()
        # At least both listeners and the connections the nodes' pools keep.
        assert killed >= 2, f"only {killed} backends terminated"
        t0 = time.monotonic()
        await on_b.start()  # through B, whose pooled connections are all dead too
        started = time.monotonic() - t0
        task = await asyncio.wait_for(poll, MAX_RECOVERY * 2)
        delay = time.monotonic() - t0
        print(
            f"killed {killed} backends; StartWorkflow on B took {started * 1000:.0f} ms;"
            f" decision task delivered on A after {delay * 1000:.0f} ms"
        )
        assert task.task_token, "node A's poll ended empty"
        assert task.workflow_execution.run_id == on_b.run_id
        assert delay < MAX_RECOVERY, f"decision task reached node A after {delay:.3f}s"

        # The listener noticed the loss and reconnected (both nodes' listeners are back).
        async def listeners_back() -> bool:
            return await admin.listeners_since(killed_at) >= 2

        await wait_until(lambda: logged(node_a, "listener.reconnect"))
        await wait_until(lambda: logged(node_b, "listener.reconnect"))
        await wait_until(listeners_back, timeout=10)

        # ...and it really listens again: hand-overs are immediate (NOTIFY), not
        # paced by the 2 s re-check. Three rounds, so a re-check cannot pass by luck.
        for round_no in range(3):
            on_a2, on_b2 = Driver(stub_a), Driver(stub_b)
            on_b2.task_list, on_b2.workflow_id = on_a2.task_list, on_a2.workflow_id
            poll = asyncio.create_task(on_a2.poll_decision())
            await wait_until(
                lambda drv=on_a2: poller_waiting(
                    stub_a, drv.task_list, c.TASK_LIST_KIND_DECISION, "decider-1"
                )
            )
            t0 = time.monotonic()
            await on_b2.start()
            task2 = await asyncio.wait_for(poll, MAX_RECOVERY * 2)
            delay = time.monotonic() - t0
            print(f"after reconnect, round {round_no}: delivered on A after {delay * 1000:.0f} ms")
            assert task2.workflow_execution.run_id == on_b2.run_id
            assert delay < MAX_WAKE_DELAY, f"hand-over took {delay:.3f}s: is A listening?"

        # The first workflow still runs to its end across the two nodes.
        await on_a.decide(task, complete("done"))
        assert await on_b.types() == [
            "WorkflowStarted",
            "DeciderScheduled",
            "DeciderStarted",
            "DeciderCompleted",
            "WorkflowSuccess",
        ]


# -- 2. the pool's connections are all dead ----------------------------------------------


async def test_next_rpcs_after_all_backends_are_killed_succeed(
    node: ServerProcess, admin: Admin
) -> None:
    async with node.channel() as channel:
        stub = sg.WorkflowServiceStub(channel)
        # Fill the pool with several connections, so several dead ones are waiting in it.
        warm = [Driver(stub) for _ in range(5)]
        await asyncio.gather(*(w.start() for w in warm))
        await asyncio.gather(*(w.history() for w in warm))

        wf = Driver(stub)
        activities = unique("acts")
        calls: list[tuple[str, int, float]] = []

        async def after_kill(name: str, call: Any) -> Any:
            """Kill every backend, then make one RPC: it must simply succeed."""
            killed = await admin.terminate_backends()
            t0 = time.monotonic()
            try:
                result = await call
            except grpc.aio.AioRpcError as exc:
                raise AssertionError(
                    f"{name} right after killing {killed} backends failed:"
                    f" {exc.code().name} {exc.details()}\n{node.log_tail()}"
                ) from exc
            calls.append((name, killed, time.monotonic() - t0))
            return result

        await after_kill("StartWorkflow", wf.start())
        task = await after_kill("PollForDecisionTask", wf.poll_decision())
        assert task.task_token, "poll after the kill ended empty"
        await after_kill(
            "RespondDecisionTaskCompleted",
            wf.decide(task, schedule("x", "work", activities, start_to_close=30)),
        )
        act = await after_kill("PollForActivityTask", wf.poll_activity(activities))
        assert act.activity_id == "x"
        await after_kill("RespondActivityTaskCompleted", wf.finish_activity(act, "ok"))
        task = await after_kill("PollForDecisionTask", wf.poll_decision())
        assert task.task_token
        await after_kill("RespondDecisionTaskCompleted", wf.decide(task, complete("done")))
        events = await after_kill("GetWorkflowHistory", wf.history())
        for name, killed, seconds in calls:
            print(f"{name:30s} after killing {killed:2d} backends: {seconds * 1000:6.0f} ms")
        assert all(killed >= 1 for _, killed, _ in calls), calls
        assert check_history(events) == [
            "WorkflowStarted",
            "DeciderScheduled",
            "DeciderStarted",
            "DeciderCompleted",
            "ActivityScheduled",
            "ActivityStarted",
            "ActivitySuccess",
            "DeciderScheduled",
            "DeciderStarted",
            "DeciderCompleted",
            "WorkflowSuccess",
        ]
        assert node.proc is not None and node.proc.poll() is None, node.log_tail()


# -- 3. a storm of terminations while workflows run ----------------------------------------


@dataclass
class Calls:
    """Every RPC of the storm test, with the client's retry policy: UNAVAILABLE is
    retried; any other failure fails the test."""

    stub: sg.WorkflowServiceStub
    made: int = 0
    failed: Counter[tuple[str, str]] = field(default_factory=Counter)
    answered_twice: Counter[str] = field(default_factory=Counter)
    times: list[float] = field(default_factory=list)

    async def __call__(self, name: str, request: Any) -> Any:
        deadline = time.monotonic() + 30
        retried = False
        while True:
            self.made += 1
            self.times.append(time.monotonic())
            try:
                return await getattr(self.stub, name)(request, timeout=20)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline:
                    self.failed[(name, code.name)] += 1
                    retried = True
                    await asyncio.sleep(0.05)  # back-off before the retry
                    continue
                if code == grpc.StatusCode.NOT_FOUND and retried and name.startswith("Respond"):
                    # An earlier attempt of this answer committed, but its reply was lost
                    # (the connection died after COMMIT, or the server's retry ran out
                    # before it knew): the retry then finds the task already closed.
                    # The answer was applied exactly once, so this is success.
                    self.answered_twice[name] += 1
                    return None
                self.failed[(name, code.name)] += 1
                raise AssertionError(f"{name} failed with {code.name}: {exc.details()}") from exc


async def run_workflow(calls: Calls, index: int) -> tuple[str, str]:
    """Start one workflow and play its decider and activity runner until it completes."""
    workflow_id, task_list, activities = unique(f"storm{index}"), unique("tl"), unique("acts")
    started = await calls(
        "StartWorkflow",
        s.StartWorkflowRequest(
            namespace="default",
            workflow_id=workflow_id,
            workflow_type=c.WorkflowType(name="storm"),
            task_list=task_list,
            input=payload({"n": index}),
            decider_timeout=dur(STORM_TASK_TIMEOUT),
            request_id=unique("start"),  # a retried start answers with the run it started
        ),
    )
    run_id = started.run_id

    async def runner() -> None:
        while True:
            act = await calls(
                "PollForActivityTask",
                s.PollForActivityTaskRequest(
                    namespace="default", task_list=activities, identity="runner"
                ),
            )
            if act.task_token:
                await calls(
                    "RespondActivityTaskCompleted",
                    s.RespondActivityTaskCompletedRequest(
                        task_token=act.task_token, result=payload(act.activity_id), identity="r"
                    ),
                )

    async def history() -> list[h.HistoryEvent]:
        resp = await calls(
            "GetWorkflowHistory",
            s.GetWorkflowHistoryRequest(
                namespace="default",
                execution=c.WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            ),
        )
        return list(resp.events)

    running = asyncio.create_task(runner())
    try:
        attempt = 0
        while True:
            task = await calls(
                "PollForDecisionTask",
                s.PollForDecisionTaskRequest(
                    namespace="default", task_list=task_list, identity="decider"
                ),
            )
            if not task.task_token:
                continue
            types = {e.type for e in task.events}
            scheduled = {e.event_id for e in task.events if e.type == "ActivityScheduled"}
            done = {
                attributes(e).scheduled_event_id for e in task.events if e.type in ACTIVITY_CLOSES
            }
            decisions: list[d.Decision] = []
            if "ActivitySuccess" in types:
                decisions = [complete(index)]
            elif not scheduled - done:
                # None yet, or the last one timed out: schedule one (again).
                attempt += 1
                decisions = [
                    schedule(f"a{attempt}", "work", activities, start_to_close=STORM_TASK_TIMEOUT)
                ]
            await calls(
                "RespondDecisionTaskCompleted",
                s.RespondDecisionTaskCompletedRequest(
                    task_token=task.task_token, decisions=decisions, identity="decider"
                ),
            )
            if decisions and decisions[0].HasField("complete_workflow"):
                last = await history()
                if last and last[-1].type == "WorkflowSuccess":
                    return workflow_id, run_id
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_storm_of_terminations_loses_and_doubles_nothing(
    node: ServerProcess, admin: Admin, postgres_url: str
) -> None:
    async with node.channel() as channel:
        calls = Calls(sg.WorkflowServiceStub(channel))
        storm_kills: list[int] = []
        window: list[float] = []

        async def storm() -> None:
            window.append(time.monotonic())
            end = window[0] + STORM_SECONDS
            while time.monotonic() < end:
                storm_kills.append(await admin.terminate_backends())
                await asyncio.sleep(STORM_EVERY)  # the storm's cadence, not a wait for a result
            window.append(time.monotonic())

        t0 = time.monotonic()
        storming = asyncio.create_task(storm())
        flows = asyncio.gather(*(run_workflow(calls, i) for i in range(N_STORM_WORKFLOWS)))
        try:
            finished = await asyncio.wait_for(flows, 90)
        except BaseException:
            print(node.log_tail(80))
            raise
        finally:
            await storming
        elapsed = time.monotonic() - t0

        during = sum(1 for t in calls.times if window[0] <= t <= window[1])
        retries = sum(n for (name, code), n in calls.failed.items() if code == "UNAVAILABLE")
        print(
            f"{N_STORM_WORKFLOWS} workflows in {elapsed:.2f}s; {len(storm_kills)} terminations"
            f" killed {sum(storm_kills)} backends; {calls.made} RPCs, {during} during the storm;"
            f" UNAVAILABLE: {dict(calls.failed)}; NOT_FOUND on a retried answer:"
            f" {dict(calls.answered_twice)}"
        )
        assert {code for _, code in calls.failed} <= {"UNAVAILABLE"}, calls.failed
        assert sum(storm_kills) > len(storm_kills), "the storm killed (almost) nothing"
        assert during > 0, "no RPC overlapped the storm"
        assert node.proc is not None and node.proc.poll() is None, node.log_tail()

        # Every workflow completed, with a history that has no gap and no double.
        timeouts: Counter[str] = Counter()
        for workflow_id, run_id in finished:
            drv = Driver(calls.stub)
            drv.workflow_id, drv.run_id = workflow_id, run_id
            types = check_history(await drv.history())
            timeouts.update(t for t in types if t.endswith("TimedOut"))
            assert Counter(types)["ActivitySuccess"] == 1, types
            desc = await calls.stub.DescribeWorkflow(
                s.DescribeWorkflowRequest(
                    namespace="default",
                    execution=c.WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                )
            )
            assert desc.info.status == c.WORKFLOW_STATUS_COMPLETED, desc
            assert desc.info.history_length == len(types)
        print(f"retries: {retries}; tasks handed out again after a timeout: {dict(timeouts)}")

        # The tables agree: one row per event, no task left behind, every run closed.
        async with await psycopg.AsyncConnection.connect(_conninfo(postgres_url)) as conn:
            cur = await conn.execute(
                "SELECT count(*), count(DISTINCT (run_id, event_id)),"
                " sum(CASE WHEN event_id = 1 THEN 1 ELSE 0 END) FROM history_events"
                " WHERE run_id = ANY(%s)",
                ([run_id for _, run_id in finished],),
            )
            rows, distinct, firsts = await cur.fetchone() or (0, 0, 0)
            assert rows == distinct, f"{rows - distinct} duplicate event rows"
            assert firsts == N_STORM_WORKFLOWS
            cur = await conn.execute("SELECT count(*) FROM tasks")
            assert (await cur.fetchone() or (None,))[0] == 0, "task rows left behind"
            cur = await conn.execute("SELECT status, count(*) FROM runs GROUP BY status")
            by_status = dict(await cur.fetchall())
            assert by_status == {"completed": N_STORM_WORKFLOWS}, by_status


# -- 4. a poll that answers UNAVAILABLE must not have taken a task -------------------------


async def test_poll_that_answers_unavailable_has_not_taken_the_task(
    node: ServerProcess, admin: Admin
) -> None:
    """A connection lost *after* the claim committed: the poll must still hand the
    task over (retry its reads), or else leave it claimable. Otherwise a client that
    retries on UNAVAILABLE, as it should, finds nothing until the decider timeout
    (10 s by default; for activity tasks start-to-close, 300 s by default)."""
    big_messages = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    async with grpc.aio.insecure_channel(node.address, options=big_messages) as channel:
        stub = sg.WorkflowServiceStub(channel)
        # Catching the read in flight is a race the test can lose on a busy machine
        # (the poll may finish its read between two looks): a lost race proves
        # nothing either way, so it is run again on a new workflow, a few times.
        for _ in range(CATCH_ATTEMPTS):
            if await _poll_killed_after_its_claim(stub, admin):
                return
        pytest.fail(
            f"in {CATCH_ATTEMPTS} tries the poll ended before its history read could be caught"
        )


CATCH_ATTEMPTS = 5


async def _poll_killed_after_its_claim(stub: sg.WorkflowServiceStub, admin: Admin) -> bool:
    """One try: False if the poll's history read could not be caught in flight;
    otherwise check that the claimed task still reaches a poller."""
    wf = Driver(stub)
    await wf.start()
    # A large history makes the poll's read of it (after the claim) long enough to
    # be seen in pg_stat_activity and killed while it runs: ~16 MB in 80 signals.
    big = payload("x" * 200_000)
    for n in range(80):
        await stub.SignalWorkflow(
            s.SignalWorkflowRequest(
                namespace="default",
                execution=c.WorkflowExecution(workflow_id=wf.workflow_id),
                signal_name=f"s{n}",
                input=big,
            )
        )

    killed: list[int] = []

    async def kill_history_reader() -> bool:
        """Terminate a backend reading history_events: in a poll, that read
        comes only after the claim's transaction has committed."""
        cur = await admin.conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND state = 'active'"
            " AND query LIKE '%%history_events.data%%'",
            (admin.database,),
        )
        killed.extend(1 for (ok,) in await cur.fetchall() if ok)
        return bool(killed) or poll.done()

    poll = asyncio.create_task(wf.poll_decision())
    await wait_until(kill_history_reader, timeout=20, interval=0.001)
    try:
        task = await poll
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAVAILABLE, (exc.code(), exc.details())
        # The client does what UNAVAILABLE invites: it polls again at once.
        task = await wf.poll_decision()
        types = await wf.types()
        assert task.task_token, (
            "PollForDecisionTask answered UNAVAILABLE after its claim had committed"
            f" (history ends {types[-3:]}): the started decision task reached no one"
            " and comes back only after the decider timeout"
        )
    assert task.workflow_execution.run_id == wf.run_id
    await wf.decide(task, complete("done"))
    assert (await wf.types())[-1] == "WorkflowSuccess"
    return bool(killed)

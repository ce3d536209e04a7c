"""PostgreSQL connection loss: every backend of the node's database is killed
with pg_terminate_backend (what a failover, a proxy restart or an idle-session
reaper does), and the nodes must carry on without being restarted.

- The LISTEN connection reconnects and wakes its pollers: a task committed on
  another node still reaches a poller that was waiting through the loss.
- Pooled connections that died are replaced before use (pool_pre_ping) or the
  transaction is retried: the very next RPCs succeed.
- Under a storm of terminations, RPCs fail with UNAVAILABLE only, and retried
  workflows complete with histories that have nothing missing or doubled
  (test_pg_connection_storm.py).
- A poll whose connection dies after its claim committed must not swallow the
  task: it hands it over, or the retried poll finds it.

The admin connection, the server fixtures and the history check are in
pg_loss_setup.py. Each test runs on its own database (the `postgres_url`
fixture), and only that database's backends are terminated: the server is
shared with other sessions.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.durability import pg_loss_setup
from tests.durability.pg_loss_setup import Admin, check_history, logged, poller_waiting
from tests.helpers import Driver, complete, payload, schedule, unique, wait_until
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.postgres

MAX_RECOVERY = 5.0  # listener loss: a reconnect, then every poll looks again (wake_all), with room
MAX_WAKE_DELAY = 1.0  # a hand-over through a working LISTEN connection (as in test_two_nodes)

# The fixtures the tests below take, bound here so that pytest finds them in this
# module (they live in pg_loss_setup.py, shared with the other connection-loss module).
admin = pg_loss_setup.admin
nodes = pg_loss_setup.nodes
node = pg_loss_setup.node


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
        # paced by a re-check. Three rounds, so a re-check cannot pass by luck.
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

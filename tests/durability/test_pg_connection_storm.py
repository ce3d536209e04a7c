"""PostgreSQL connection loss, the storm: while workflows run, every backend of
the node's database is killed again and again with pg_terminate_backend. RPCs
fail with UNAVAILABLE only, and retried workflows complete with histories that
have nothing missing or doubled, and tables that agree.

The single losses (listener, pool, a poll after its claim) are in
test_pg_connection_loss.py; the admin connection, the server fixtures and the
history check in pg_loss_setup.py. Each test runs on its own database (the
`postgres_url` fixture), and only that database's backends are terminated.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import grpc
import psycopg
import pytest

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.durability import pg_loss_setup
from tests.durability.pg_loss_setup import Admin, attributes, check_history, conninfo
from tests.helpers import Driver, complete, dur, payload, schedule, unique
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.postgres

STORM_SECONDS = 3.0
STORM_EVERY = 0.2
N_STORM_WORKFLOWS = 10
# Short task timeouts in the storm: a task claimed by a poll whose answer was then
# lost (UNAVAILABLE) is handed out again after this instead of the 10 s default.
# (That a poll can lose a task at all is what test 4, in test_pg_connection_loss.py,
# pins down; test 3 checks the histories stay whole either way and prints how many
# tasks came back by timeout.)
STORM_TASK_TIMEOUT = 3.0
ACTIVITY_CLOSES = {
    "ActivitySuccess",
    "ActivityFailed",
    "ActivityTimedOut",
    "ActivityScheduledTimeout",
    "ActivityCanceled",
}

# The fixtures the tests below take, bound here so that pytest finds them in this
# module (they live in pg_loss_setup.py, shared with the other connection-loss module).
admin = pg_loss_setup.admin
node = pg_loss_setup.node


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
        async with await psycopg.AsyncConnection.connect(conninfo(postgres_url)) as conn:
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

"""Stuck runs made for real, for the `weft doctor` tests: each case drives runs
through the gRPC API into the state the doctor must find."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import create_engine, update

from orchestrator.store import migrate
from orchestrator.store.schema import deadlines
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, dur, schedule, unique

# What the tests pass as no_poller_after: short, so that a case is stuck within
# a test's patience (the server's sightings are per poll, so this is exact enough).
NO_POLLER_AFTER = 1.0


def request_lock(name: str) -> d.Decision:
    return d.Decision(request_lock=d.RequestLockDecision(lock_name=name))


async def ask(wf: Driver, *decisions: d.Decision) -> None:
    """Answer the run's next decision task with `decisions`."""
    task = await wf.poll_decision()
    await wf.decide(task, *decisions)


async def started(stub: sg.WorkflowServiceStub, namespace: str = "default") -> Driver:
    wf = Driver(stub, namespace)
    await wf.start()
    return wf


async def unpolled_decision(stub: sg.WorkflowServiceStub, namespace: str = "default") -> Driver:
    """A run whose first decision task waits on a list nobody polls, long enough."""
    wf = await started(stub, namespace)
    await asyncio.sleep(NO_POLLER_AFTER + 0.2)
    return wf


async def unpolled_activity(stub: sg.WorkflowServiceStub) -> tuple[Driver, str]:
    """A run that scheduled two activities on a list nobody polls (its decider polled)."""
    wf = await started(stub)
    task_list = unique("nobody-runs-this")
    await ask(wf, schedule("a1", "resize", task_list), schedule("a2", "resize", task_list))
    await asyncio.sleep(NO_POLLER_AFTER + 0.2)
    return wf, task_list


@dataclass
class LockChain:
    """`waiter` waits for `second` held by `middle`, which waits for `first` held by
    `holder`, whose next decision task sits on a list nobody polls."""

    holder: Driver
    middle: Driver
    waiter: Driver
    first: str
    second: str


async def lock_chain(stub: sg.WorkflowServiceStub) -> LockChain:
    first, second = unique("lock-first"), unique("lock-second")
    holder, middle, waiter = [await started(stub) for _ in range(3)]
    await ask(holder, request_lock(first))  # granted: LockAcquired schedules its next task
    await ask(middle, request_lock(second))
    await ask(middle, request_lock(first))  # queued behind the holder
    await ask(waiter, request_lock(second))  # queued behind the middle run
    # Nobody polls the holder's list again: its task waits, its list goes quiet.
    await asyncio.sleep(NO_POLLER_AFTER + 0.2)
    return LockChain(holder, middle, waiter, first, second)


async def deadlock(stub: sg.WorkflowServiceStub) -> tuple[Driver, Driver, str, str]:
    """Two runs, each holding the lock the other waits for."""
    one, two = await started(stub), await started(stub)
    a, b = unique("lock-a"), unique("lock-b")
    await ask(one, request_lock(a))
    await ask(two, request_lock(b))
    await ask(one, request_lock(b))
    await ask(two, request_lock(a))
    return one, two, a, b


async def overdue_timer(stub: sg.WorkflowServiceStub, db_url: str) -> Driver:
    """A run with a timer whose deadline row is ten minutes past due, as the server
    would have left it had no scanner run since (the caller stops the scanner)."""
    wf = await started(stub)
    timer = d.StartTimerDecision(timer_id="t1", start_to_fire_timeout=dur(3600))
    await ask(wf, d.Decision(start_timer=timer))
    past = (datetime.now(UTC) - timedelta(minutes=10)).replace(tzinfo=None)
    engine = create_engine(migrate.sync_url(db_url))
    try:
        with engine.begin() as conn:
            moved = conn.execute(
                update(deadlines)
                .where(deadlines.c.run_id == wf.run_id, deadlines.c.kind == "timer")
                .values(due=past)
            )
            assert moved.rowcount == 1
    finally:
        engine.dispose()
    return wf

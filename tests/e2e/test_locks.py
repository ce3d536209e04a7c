"""Locks served by the history service, through the real gRPC server on both
databases: a free lock is granted at once, waiters queue durably and are granted
in request order, every kind of close releases, an operator can force-release,
and bad requests change nothing."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from orchestrator.server import Server
from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, unique, wait_until


@pytest.fixture
async def admin(server: Server) -> ag.AdminServiceStub:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield ag.AdminServiceStub(channel)
    await channel.close()


def request(name: str) -> d.Decision:
    return d.Decision(request_lock=d.RequestLockDecision(lock_name=name))


def release(name: str) -> d.Decision:
    return d.Decision(release_lock=d.ReleaseLockDecision(lock_name=name))


async def started(stub: sg.WorkflowServiceStub, namespace: str = "default") -> Driver:
    wf = Driver(stub, namespace)
    await wf.start()
    return wf


async def ask(wf: Driver, *decisions: d.Decision) -> None:
    """Answer the run's next decision task with `decisions`."""
    task = await wf.poll_decision()
    await wf.decide(task, *decisions)


async def nudge(wf: Driver) -> None:
    await wf.stub.SignalWorkflow(
        s.SignalWorkflowRequest(
            namespace=wf.namespace,
            execution=c.WorkflowExecution(workflow_id=wf.workflow_id),
            signal_name="nudge",
        )
    )


async def events(wf: Driver, type_name: str) -> list[h.HistoryEvent]:
    return [e for e in await wf.history() if e.type == type_name]


async def holds(wf: Driver, name: str) -> bool:
    for e in reversed(await wf.history()):
        if e.type == "LockAcquired" and e.lock_acquired.lock_name == name:
            return True
        if e.type == "LockReleased" and e.lock_released.lock_name == name:
            return False
    return False


async def lock_info(admin: ag.AdminServiceStub, name: str, namespace: str = "") -> a.LockInfo:
    resp = await admin.ListLocks(a.ListLocksRequest(namespace=namespace, lock_name=name))
    return resp.locks[0] if resp.locks else a.LockInfo(lock_name=name)


async def test_a_free_lock_is_granted_at_once_and_shown(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    wf = await started(stub)
    name = unique("lock")
    await ask(wf, request(name))
    types = await wf.types()
    assert types[-4:] == ["DeciderCompleted", "LockRequested", "LockAcquired", "DeciderScheduled"]
    acquired = (await events(wf, "LockAcquired"))[0].lock_acquired
    requested = (await events(wf, "LockRequested"))[0]
    assert acquired.requested_event_id == requested.event_id
    assert acquired.previous_holder_run_id == ""

    info = await lock_info(admin, name)
    assert (info.holder.workflow_id, info.holder.run_id) == (wf.workflow_id, wf.run_id)
    assert list(info.waiters) == []
    desc = await stub.DescribeWorkflow(
        s.DescribeWorkflowRequest(execution=c.WorkflowExecution(workflow_id=wf.workflow_id))
    )
    assert [(lk.lock_name, lk.state) for lk in desc.locks] == [(name, "held")]


async def test_waiters_are_granted_in_request_order(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    name = unique("lock")
    runs = [await started(stub) for _ in range(4)]
    for wf in runs:
        await ask(wf, request(name))
    info = await lock_info(admin, name)
    assert info.holder.workflow_id == runs[0].workflow_id
    assert [w.workflow_id for w in info.waiters] == [wf.workflow_id for wf in runs[1:]]
    for wf in runs[1:]:
        assert not await holds(wf, name)
        assert (await wf.types())[-1] == "LockRequested"  # no decision task while it waits

    # Each holder lets go in its own way; the next in line gets it, and knows from whom.
    await ask(runs[0], release(name))  # the decider releases it
    assert await holds(runs[1], name)
    got = (await events(runs[1], "LockAcquired"))[0].lock_acquired
    assert got.previous_holder_run_id == runs[0].run_id

    await ask(runs[1], complete("done"))  # its close releases it
    assert await holds(runs[2], name)
    await stub.TerminateWorkflow(  # and so does a terminate
        s.TerminateWorkflowRequest(
            execution=c.WorkflowExecution(workflow_id=runs[2].workflow_id), reason="stuck"
        )
    )
    assert await holds(runs[3], name)
    info = await lock_info(admin, name)
    assert info.holder.workflow_id == runs[3].workflow_id
    assert list(info.waiters) == []
    # The granted waiter's decider hears of it: LockAcquired schedules a decision task.
    assert (await runs[3].types())[-2:] == ["LockAcquired", "DeciderScheduled"]


async def test_a_waiter_that_closes_or_withdraws_leaves_the_queue(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    name = unique("lock")
    holder, quitter, withdrawer, patient = [await started(stub) for _ in range(4)]
    for wf in (holder, quitter, withdrawer, patient):
        await ask(wf, request(name))
    await stub.TerminateWorkflow(
        s.TerminateWorkflowRequest(execution=c.WorkflowExecution(workflow_id=quitter.workflow_id))
    )
    await nudge(withdrawer)  # a waiting run has no decision task until something happens
    await ask(withdrawer, release(name))
    withdrawn = (await events(withdrawer, "LockReleased"))[0].lock_released
    assert withdrawn.was_waiting and not withdrawn.forced
    info = await lock_info(admin, name)
    assert [w.workflow_id for w in info.waiters] == [patient.workflow_id]

    await ask(holder, complete())
    assert await holds(patient, name)
    assert not await events(quitter, "LockAcquired")
    assert not await events(withdrawer, "LockAcquired")


async def test_every_close_releases_what_it_holds(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    closes = {
        "complete": complete("ok"),
        "fail": d.Decision(fail_workflow=d.FailWorkflowDecision(reason="boom")),
        "cancel": d.Decision(cancel_workflow=d.CancelWorkflowDecision()),
        "continue": d.Decision(continue_as_new=d.ContinueAsNewDecision()),
    }
    for how, close in closes.items():
        name = unique(f"lock-{how}")
        holder, waiter = await started(stub), await started(stub)
        await ask(holder, request(name))
        await ask(waiter, request(name))
        await ask(holder, close)
        assert await holds(waiter, name), how
        assert (await lock_info(admin, name)).holder.workflow_id == waiter.workflow_id, how


async def test_the_execution_timeout_releases_the_lock(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    from tests.helpers import dur

    name = unique("lock")
    holder = Driver(stub)
    await holder.start(execution_timeout=dur(1))
    waiter = await started(stub)
    await ask(holder, request(name))
    await ask(waiter, request(name))
    await wait_until(lambda: holds(waiter, name), timeout=20)
    assert (await holder.types())[-1] == "WorkflowTimedOut"


async def test_an_operator_force_releases_a_lock(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    name = unique("lock")
    holder, waiter = await started(stub), await started(stub)
    await ask(holder, request(name))
    await ask(waiter, request(name))
    resp = await admin.ForceReleaseLock(
        a.ForceReleaseLockRequest(lock_name=name, identity="ops@host", reason="stuck for a day")
    )
    assert (resp.released_workflow_id, resp.granted_workflow_id) == (
        holder.workflow_id,
        waiter.workflow_id,
    )
    forced = (await events(holder, "LockReleased"))[0].lock_released
    assert (forced.forced, forced.identity, forced.reason) == (True, "ops@host", "stuck for a day")
    assert await holds(waiter, name)

    # The old holder's decider may still release it: refused, and told so.
    await ask(holder, release(name))
    failed = (await events(holder, "ReleaseLockFailed"))[0].release_lock_failed
    assert failed.cause == "LOCK_NOT_HELD"

    await ask(waiter, complete())
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.ForceReleaseLock(a.ForceReleaseLockRequest(lock_name=name, identity="ops"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_bad_lock_decisions_are_refused_or_fail(stub: sg.WorkflowServiceStub) -> None:
    wf = await started(stub)
    task = await wf.poll_decision()
    before = await wf.types()
    for bad in (request(""), request("x" * 256), release(""), request("bell\x07")):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await wf.decide(task, bad)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "lock_name" in (info.value.details() or "")
    assert await wf.types() == before  # nothing appended; the task is still open

    name = unique("lock")
    # The grant comes after the batch: within it, the first request still waits.
    await wf.decide(task, request(name), request(name), release("never-asked"))
    await ask(wf, request(name))  # granted by now
    causes = [e.request_lock_failed.cause for e in await events(wf, "RequestLockFailed")]
    assert causes == ["LOCK_ALREADY_REQUESTED", "LOCK_ALREADY_HELD"]
    failed = await events(wf, "ReleaseLockFailed")
    assert [e.release_lock_failed.cause for e in failed] == ["LOCK_NOT_HELD"]
    # A refused decision is news to the decider: it gets a task to see it.
    assert (await wf.types())[-1] == "DeciderScheduled"


async def test_locks_are_scoped_to_the_namespace(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    name = unique("lock")
    here, there = await started(stub, "default"), await started(stub, unique("ns"))
    await ask(here, request(name))
    await ask(there, request(name))
    assert await holds(here, name) and await holds(there, name)
    assert (await lock_info(admin, name, there.namespace)).holder.workflow_id == there.workflow_id


async def test_concurrent_requests_never_make_two_holders(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    """Many runs ask for one free lock at the same instant; then each holder
    releases as soon as it holds. There is one holder at any time, and everyone
    gets it exactly once."""
    name = unique("lock")
    runs = [await started(stub) for _ in range(12)]
    tasks = [await wf.poll_decision() for wf in runs]
    await asyncio.gather(*(wf.decide(t, request(name)) for wf, t in zip(runs, tasks, strict=True)))

    order: list[str] = []
    while len(order) < len(runs):
        info = await lock_info(admin, name)
        assert info.HasField("holder"), "a lock with waiters must have a holder"
        holder = next(wf for wf in runs if wf.workflow_id == info.holder.workflow_id)
        assert holder.workflow_id not in order
        order.append(holder.workflow_id)
        await ask(holder, complete())
    assert sorted(order) == sorted(wf.workflow_id for wf in runs)
    assert (await admin.ListLocks(a.ListLocksRequest(lock_name=name))).locks == []

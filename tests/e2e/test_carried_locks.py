"""Locks carried over a continue-as-new (ContinueAsNewDecision.carried_locks),
through the real gRPC server on both databases: the new run holds the lock from
its first event, with no LockReleased in between and no waiter granted it; an
awaited lock keeps its place in the queue; locks not carried are released by
the close as before; a name the run does not have fails the close; the run's
retention goes on with it."""

from __future__ import annotations

import json

import grpc
import pytest

from orchestrator.server import Server
from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.e2e.test_locks import ask, events, holds, lock_info, nudge, release, request, started
from tests.helpers import Driver, unique


@pytest.fixture
async def admin(server: Server) -> ag.AdminServiceStub:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield ag.AdminServiceStub(channel)
    await channel.close()


def continue_carrying(*names: str) -> d.Decision:
    return d.Decision(
        continue_as_new=d.ContinueAsNewDecision(
            input=c.Payload(data=b'{"round": 2}', encoding="json"), carried_locks=list(names)
        )
    )


async def continued(wf: Driver, *names: str) -> str:
    """Answer the next decision task with a ContinueAsNew carrying `names`; follow
    the driver to the new run and return the old run id."""
    old = wf.run_id
    await nudge(wf)  # a decision task to answer
    await ask(wf, continue_carrying(*names))
    closed = (await events(wf, "WorkflowContinuedAsNew"))[0]
    wf.run_id = closed.workflow_continued_as_new.new_run_id
    return old


async def test_a_held_lock_passes_to_the_new_run_without_a_release(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    name = unique("lock")
    holder = await started(stub)
    await ask(holder, request(name))
    waiter = await started(stub)
    await ask(waiter, request(name))
    await ask(holder)  # the LockAcquired task

    old_run = await continued(holder, name)

    old = Driver(stub)
    old.workflow_id, old.run_id = holder.workflow_id, old_run
    old_history = await old.history()
    assert "LockReleased" not in [e.type for e in old_history]
    close = old_history[-1].workflow_continued_as_new
    assert [(x.lock_name, x.held) for x in close.carried_locks] == [(name, True)]
    first = (await holder.history())[0].workflow_started
    assert first.continued_from_run_id == old_run
    assert [(x.lock_name, x.held) for x in first.carried_locks] == [(name, True)]
    acquired = (await events(old, "LockAcquired"))[0]
    # The time it was first taken goes on with it.
    assert first.carried_locks[0].since == acquired.timestamp

    info = await lock_info(admin, name)
    assert (info.holder.workflow_id, info.holder.run_id) == (holder.workflow_id, holder.run_id)
    assert [w.run_id for w in info.waiters] == [waiter.run_id]
    assert not await holds(waiter, name)

    # Carried again, then given back by the new run: only now the waiter has it.
    await continued(holder, name)
    info = await lock_info(admin, name)
    assert info.holder.run_id == holder.run_id
    await nudge(holder)
    await ask(holder, release(name))
    assert await holds(waiter, name)
    granted = (await events(waiter, "LockAcquired"))[0].lock_acquired
    assert granted.previous_holder_run_id == holder.run_id


async def test_an_awaited_lock_keeps_its_place_in_the_queue(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    name = unique("lock")
    holder = await started(stub)
    await ask(holder, request(name))
    first = await started(stub)
    await ask(first, request(name))
    second = await started(stub)
    await ask(second, request(name))

    await continued(first, name)
    started_event = (await first.history())[0].workflow_started
    assert [(x.lock_name, x.held) for x in started_event.carried_locks] == [(name, False)]
    info = await lock_info(admin, name)
    assert [w.run_id for w in info.waiters] == [first.run_id, second.run_id]

    await ask(holder)  # its LockAcquired task
    await nudge(holder)
    await ask(holder, release(name))
    assert await holds(first, name)
    assert not await holds(second, name)


async def test_locks_not_carried_are_released_by_the_close(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    kept, dropped = unique("kept"), unique("dropped")
    holder = await started(stub)
    await ask(holder, request(kept), request(dropped))
    waiter = await started(stub)
    await ask(waiter, request(dropped))
    await ask(holder)

    await continued(holder, kept)
    assert await holds(waiter, dropped)
    assert (await lock_info(admin, kept)).holder.run_id == holder.run_id


async def test_carrying_a_lock_the_run_does_not_have_fails_the_close(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    name = unique("lock")
    holder = await started(stub)
    await ask(holder, request(name))
    await ask(holder)

    await nudge(holder)
    await ask(holder, continue_carrying(name, "not-mine"))
    failed = (await events(holder, "WorkflowCloseFailed"))[0].workflow_close_failed
    assert (failed.decision_type, failed.cause) == ("ContinueAsNew", "LOCK_NOT_HELD")
    assert "WorkflowContinuedAsNew" not in await holder.types()
    assert (await lock_info(admin, name)).holder.run_id == holder.run_id
    # The decider is told (WorkflowCloseFailed is a trigger) and can try again.
    await continued(holder, name)
    assert (await lock_info(admin, name)).holder.run_id == holder.run_id


async def test_an_empty_carried_lock_name_is_refused(stub: sg.WorkflowServiceStub) -> None:
    wf = await started(stub)
    task = await wf.poll_decision()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await wf.decide(task, continue_carrying(""))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "carried_locks" in (err.value.details() or "")
    assert await wf.types() == ["WorkflowStarted", "DeciderScheduled", "DeciderStarted"]


async def test_the_retention_goes_on_with_the_workflow(stub: sg.WorkflowServiceStub) -> None:
    wf = await started(stub)
    marker = d.Decision(
        record_marker=d.RecordMarkerDecision(
            marker_name="retention",
            details=c.Payload(
                data=json.dumps({"retention": "max(2h, 4) hash nightly"}).encode(),
                encoding="json",
            ),
        )
    )
    await ask(wf, marker)
    await continued(wf)
    first = (await wf.history())[0].workflow_started
    assert (first.retention, first.retention_hash) == ("max(7200s, 4)", "nightly")


async def test_a_signal_that_came_in_meanwhile_refuses_the_close_and_keeps_the_lock(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    name = unique("lock")
    holder = await started(stub)
    await ask(holder, request(name))
    await ask(holder)
    await nudge(holder)
    task = await holder.poll_decision()
    await nudge(holder)  # after the task started: the decider has not seen it
    await holder.decide(task, continue_carrying(name))
    failed = (await events(holder, "WorkflowCloseFailed"))[0].workflow_close_failed
    assert (failed.decision_type, failed.cause) == ("ContinueAsNew", "UNHANDLED_EVENTS")
    types = await holder.types()
    assert "WorkflowContinuedAsNew" not in types and "LockReleased" not in types
    assert (await lock_info(admin, name)).holder.run_id == holder.run_id
    # The next task sees the signal, and continuing then carries the lock.
    await continued(holder, name)
    assert (await lock_info(admin, name)).holder.run_id == holder.run_id

"""AdminService.DiagnoseNamespace and DescribeWorkflow's problems, through the
real gRPC server on both databases: each stuck case is produced for real and
found, a healthy namespace reports nothing, bad requests are refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from orchestrator.config import ServerConfig
from orchestrator.engine.limits import Limits
from orchestrator.server import Server
from orchestrator.store import diagnostics as store_diagnostics
from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import diagnostics_pb2 as dg
from sdk.api.weft.v1 import schedules_pb2 as sc
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.e2e import doctor_cases as cases
from tests.helpers import Driver, complete, dur, payload, unique, wait_until

K = dg.FindingKind


@pytest.fixture
async def admin(server: Server) -> AsyncIterator[ag.AdminServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield ag.AdminServiceStub(channel)


async def diagnose(
    admin: ag.AdminServiceStub, namespace: str = "default", after: float = cases.NO_POLLER_AFTER
) -> list[dg.Finding]:
    resp = await admin.DiagnoseNamespace(
        a.DiagnoseNamespaceRequest(namespace=namespace, no_poller_after=dur(after))
    )
    return list(resp.findings)


def naming(findings: list[dg.Finding], wf: Driver) -> list[dg.Finding]:
    return [f for f in findings if any(e.run_id == wf.run_id for e in f.executions)]


async def describe(wf: Driver) -> s.DescribeWorkflowResponse:
    return await wf.stub.DescribeWorkflow(
        s.DescribeWorkflowRequest(
            namespace=wf.namespace, execution=c.WorkflowExecution(workflow_id=wf.workflow_id)
        )
    )


async def test_a_healthy_namespace_reports_nothing(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    namespace = unique("healthy")
    # A run that completed, and one whose decision task waits less than the bound.
    done = await cases.started(stub, namespace)
    await cases.ask(done, complete("ok"))
    waiting = await cases.started(stub, namespace)
    assert await diagnose(admin, namespace, after=60) == []
    assert list((await describe(waiting)).problems) == []


async def test_a_decision_task_on_a_list_nobody_polls_is_found(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    namespace = unique("nopoll")
    wf = await cases.unpolled_decision(stub, namespace)
    [found] = await diagnose(admin, namespace)
    assert found.kind == K.FINDING_KIND_NO_POLLER
    assert found.task_list == wf.task_list
    assert found.task_list_kind == c.TASK_LIST_KIND_DECISION
    assert [(e.workflow_id, e.run_id) for e in found.executions] == [(wf.workflow_id, wf.run_id)]
    assert found.count == 1 and found.HasField("since")
    assert "no poller has been seen there" in found.explanation
    assert wf.task_list in found.action and "weft decider" in found.action
    # A longer bound than the task has waited: not stuck yet.
    assert await diagnose(admin, namespace, after=3600) == []


async def test_an_activity_nobody_runs_is_found_until_a_runner_polls(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    wf, task_list = await cases.unpolled_activity(stub)
    [found] = [f for f in await diagnose(admin) if f.task_list == task_list]
    assert found.kind == K.FINDING_KIND_NO_POLLER
    assert found.task_list_kind == c.TASK_LIST_KIND_ACTIVITY and found.count == 2
    assert [e.run_id for e in found.executions] == [wf.run_id]
    assert "2 activity tasks" in found.explanation and "weft runner" in found.action
    # A runner turns up and takes one: the other still waits, but the list is
    # polled now (this node's sighting, before it is written): not stuck.
    task = await wf.poll_activity(task_list)
    assert task.task_token
    assert not [f for f in await diagnose(admin) if f.task_list == task_list]


async def test_a_lock_waiter_behind_a_holder_waiting_for_a_blocked_holder(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    chain = await cases.lock_chain(stub)
    found = await diagnose(admin)
    [blocked] = [f for f in found if f.lock_name == chain.second]
    assert blocked.kind == K.FINDING_KIND_LOCK_HOLDER_BLOCKED
    assert [(link.lock_name, link.holder.run_id) for link in blocked.chain] == [
        (chain.second, chain.middle.run_id),
        (chain.first, chain.holder.run_id),
    ]
    assert [e.run_id for e in blocked.executions] == [
        chain.waiter.run_id,
        chain.middle.run_id,
        chain.holder.run_id,
    ]
    assert chain.holder.task_list in blocked.explanation
    assert f"weft locks release {chain.first}" in blocked.action
    # The lock the middle run waits for is the same chain: not reported twice.
    assert not [f for f in found if f.lock_name == chain.first]
    # The holder's own task is found too, and the waiter's describe names the chain.
    assert [f.kind for f in naming(found, chain.holder)] == [
        K.FINDING_KIND_LOCK_HOLDER_BLOCKED,
        K.FINDING_KIND_NO_POLLER,
    ]
    # Describe judges "no poller" after the default 60 s: not stuck yet by that measure.
    assert list((await describe(chain.waiter)).problems) == []


async def test_a_lock_cycle_is_a_deadlock_in_doctor_and_in_describe(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    one, two, lock_a, lock_b = await cases.deadlock(stub)
    deadlocks = [f for f in await diagnose(admin) if f.kind == K.FINDING_KIND_LOCK_DEADLOCK]
    [found] = [f for f in deadlocks if {e.run_id for e in f.executions} == {one.run_id, two.run_id}]
    assert {link.lock_name for link in found.chain} == {lock_a, lock_b}
    assert "weft locks release" in found.action
    for wf in (one, two):
        [problem] = (await describe(wf)).problems
        assert problem.kind == K.FINDING_KIND_LOCK_DEADLOCK
        assert {e.run_id for e in problem.executions} == {one.run_id, two.run_id}


async def test_an_overdue_deadline_is_found_while_no_scanner_runs(
    server: Server,
    db_url: str,
    stub: sg.WorkflowServiceStub,
    admin: ag.AdminServiceStub,
) -> None:
    # The scanner stops, as when it is stuck on a database that fails its reads.
    [scanner] = [t for t in server._tasks if t.get_name() == "deadline-scanner"]
    scanner.cancel()
    wf = await cases.overdue_timer(stub, db_url)
    [found] = [f for f in await diagnose(admin) if f.kind == K.FINDING_KIND_DEADLINE_OVERDUE]
    assert [e.run_id for e in found.executions] == [wf.run_id]
    assert found.count == 1 and "timer" in found.explanation
    assert "scanner" in found.explanation and "weft server" in found.action
    [problem] = (await describe(wf)).problems
    assert problem.kind == K.FINDING_KIND_DEADLINE_OVERDUE


async def test_a_fresh_server_is_healthy(admin: ag.AdminServiceStub) -> None:
    # "default" is known before anything ran in it; any other unused name is not.
    assert await diagnose(admin) == []


async def test_bad_requests_are_refused(admin: ag.AdminServiceStub) -> None:
    cases_ = [
        (a.DiagnoseNamespaceRequest(namespace=unique("never-used")), grpc.StatusCode.NOT_FOUND),
        (
            a.DiagnoseNamespaceRequest(namespace="default", no_poller_after=dur(-5)),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            a.DiagnoseNamespaceRequest(namespace="default", no_poller_after=dur(0)),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (a.DiagnoseNamespaceRequest(namespace="*"), grpc.StatusCode.INVALID_ARGUMENT),
        (a.DiagnoseNamespaceRequest(namespace="x" * 300), grpc.StatusCode.INVALID_ARGUMENT),
    ]
    for request, code in cases_:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await admin.DiagnoseNamespace(request)
        assert refused.value.code() == code, request
        assert refused.value.details()


async def test_each_kind_is_bounded_and_says_so(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_diagnostics, "MAX_LISTS", 2)
    namespace = unique("many")
    runs = [await cases.started(stub, namespace) for _ in range(3)]
    await asyncio.sleep(cases.NO_POLLER_AFTER + 0.2)
    resp = await admin.DiagnoseNamespace(
        a.DiagnoseNamespaceRequest(namespace=namespace, no_poller_after=dur(cases.NO_POLLER_AFTER))
    )
    assert resp.truncated
    # The lists whose tasks waited longest are the ones read.
    assert [f.task_list for f in resp.findings] == [wf.task_list for wf in runs[:2]]


# -- a server of its own: a low event limit, and a fast periodic diagnosis --------------

LIMIT = 20


@pytest.fixture
async def small(db_url: str) -> AsyncIterator[tuple[Server, grpc.aio.Channel]]:
    config = ServerConfig(
        db_url=db_url,
        listen="127.0.0.1:0",
        long_poll=2.0,
        limits=Limits(events_per_run=LIMIT),
        diagnose_interval=0.2,
    )
    node = Server(config)
    await node.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
            yield node, channel
    finally:
        await node.stop(grace=0.5)


async def test_a_run_near_the_history_limit_is_found_and_counted_in_the_metrics(
    small: tuple[Server, grpc.aio.Channel],
) -> None:
    node, channel = small
    stub, admin = sg.WorkflowServiceStub(channel), ag.AdminServiceStub(channel)
    wf = await cases.started(stub)
    task = await wf.poll_decision()
    n = 0
    while task.started_event_id < 0.8 * LIMIT:
        n += 1
        marker = d.RecordMarkerDecision(marker_name=f"m{n}", details=payload(n))
        await wf.decide(task, d.Decision(record_marker=marker))
        await stub.SignalWorkflow(
            s.SignalWorkflowRequest(execution={"workflow_id": wf.workflow_id}, signal_name="grow")
        )
        task = await wf.poll_decision()
    [found] = await diagnose(admin, after=60)
    assert found.kind == K.FINDING_KIND_HISTORY_NEAR_LIMIT
    assert [e.run_id for e in found.executions] == [wf.run_id]
    assert found.count >= 0.8 * LIMIT and f"limit of {LIMIT}" in found.explanation
    assert "continue it as new" in found.action
    [problem] = (await describe(wf)).problems
    assert problem.kind == K.FINDING_KIND_HISTORY_NEAR_LIMIT

    def gauge(kind: str) -> float | None:
        value = node.metrics.registry.get_sample_value("weft_stuck_findings", {"kind": kind})
        return value

    async def counted() -> bool:
        return gauge("HISTORY_NEAR_LIMIT") == 1.0

    await wait_until(counted, timeout=10)
    assert gauge("NO_POLLER") == 0.0 and gauge("SCHEDULE_MISSED_SLOTS") == 0.0
    # Continued as new: the new run is short, and nothing is stuck any more.
    await wf.decide(
        task, d.Decision(continue_as_new=d.ContinueAsNewDecision(input=payload({"n": n})))
    )
    assert await diagnose(admin, after=60) == []

    async def cleared() -> bool:
        return gauge("HISTORY_NEAR_LIMIT") == 0.0

    await wait_until(cleared, timeout=10)
    await asyncio.sleep(0)


async def test_a_schedule_whose_slots_cannot_start_is_found(
    server: Server, admin: ag.AdminServiceStub
) -> None:
    """The type has no default task list and the schedule names none: every start
    is refused, the slots stay due. (The schedule is made as if created ten
    minutes ago, so its first slots are past the overdue time at once.)"""
    namespace = unique("sched")
    await admin.CreateSchedule(
        sc.CreateScheduleRequest(
            namespace=namespace,
            schedule=sc.Schedule(name="tick", workflow_type=unique("untyped"), every=dur(60)),
        )
    )
    store = server._store
    assert store is not None
    earlier = datetime.now(UTC) - timedelta(minutes=10)
    await store.schedules.change(
        namespace, "tick", lambda row: replace(row, created_at=earlier, updated_at=earlier)
    )

    async def found() -> list[dg.Finding]:
        return [
            f
            for f in await diagnose(admin, namespace)
            if f.kind == K.FINDING_KIND_SCHEDULE_MISSED_SLOTS
        ]

    [finding] = await wait_until(found, timeout=10)
    assert finding.schedule == "tick" and finding.count >= 9
    assert "no run was started for" in finding.explanation

"""The retention purge against real databases, with the clock injected (the
purge is given "now"; no test sleeps): each policy of STEPS.md, hash groups,
the namespace default, open runs and family ties, and one node at a time."""

from __future__ import annotations

import json
from datetime import timedelta

import grpc
import pytest
from sqlalchemy import create_engine, select

from orchestrator.server import Server
from orchestrator.store import migrate
from orchestrator.store.rows import utcnow
from orchestrator.store.schema import history_events, runs
from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, unique


def retention(policy: str) -> d.Decision:
    return d.Decision(
        record_marker=d.RecordMarkerDecision(
            marker_name="retention",
            details=c.Payload(data=json.dumps({"retention": policy}).encode(), encoding="json"),
        )
    )


async def closed_run(
    stub: sg.WorkflowServiceStub, wtype: str, *policies: str, namespace: str = "default"
) -> str:
    wf = Driver(stub, namespace)
    await stub.StartWorkflow(
        s.StartWorkflowRequest(
            namespace=namespace,
            workflow_id=wf.workflow_id,
            workflow_type=c.WorkflowType(name=wtype),
            task_list=wf.task_list,
        )
    )
    await wf.decide(await wf.poll_decision(), *(retention(p) for p in policies), complete())
    return wf.workflow_id


async def kept(server: Server, ids: list[str], hours: float = 1.0) -> list[str]:
    """Run one purge pass `hours` from now (past the ten minutes every closed run
    is kept); the ids still there, in order."""
    store = server._store
    assert store is not None
    await store.purge_closed(utcnow() + timedelta(hours=hours))
    found = []
    for wid in ids:
        try:
            await store.find_run("default", wid)
            found.append(wid)
        except Exception:
            pass
    return found


@pytest.fixture
async def admin(server: Server) -> ag.AdminServiceStub:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield ag.AdminServiceStub(channel)
    await channel.close()


async def test_by_default_the_three_latest_of_a_type_are_kept(
    stub: sg.WorkflowServiceStub, server: Server
) -> None:
    wtype = unique("type")
    ids = [await closed_run(stub, wtype) for _ in range(5)]
    assert await kept(server, ids) == ids[2:]


async def test_max_24h_5_keeps_a_day_or_the_last_five(
    stub: sg.WorkflowServiceStub, server: Server
) -> None:
    wtype = unique("type")
    ids = [await closed_run(stub, wtype, "max(24h, 5)") for _ in range(7)]
    assert await kept(server, ids, hours=1) == ids
    assert await kept(server, ids, hours=25) == ids[2:]


async def test_a_duration_keeps_runs_closed_within_it(
    stub: sg.WorkflowServiceStub, server: Server
) -> None:
    wtype = unique("type")
    ids = [await closed_run(stub, wtype, "2h") for _ in range(4)]
    assert await kept(server, ids, hours=1.9) == ids
    assert await kept(server, ids, hours=2.1) == []


async def test_forever_keeps_and_disabled_does_not(
    stub: sg.WorkflowServiceStub, server: Server
) -> None:
    wtype = unique("type")
    forever = [await closed_run(stub, wtype, "forever") for _ in range(5)]
    gone = [await closed_run(stub, unique("type"), "disabled") for _ in range(2)]
    assert await kept(server, forever + gone, hours=24 * 3650) == forever


async def test_hash_groups_count_separately(stub: sg.WorkflowServiceStub, server: Server) -> None:
    wtype = unique("type")
    ids = []
    for i in range(6):
        ids.append(await closed_run(stub, wtype, f"hash group-{i % 2} 2"))
    # Each group keeps its own two newest: ids 2..5.
    assert await kept(server, ids) == ids[2:]


async def test_a_later_policy_replaces_the_first_and_context_means_it(
    stub: sg.WorkflowServiceStub, server: Server
) -> None:
    wtype = unique("type")
    ids = [await closed_run(stub, wtype, "1", "max(context, 6h)") for _ in range(3)]
    assert await kept(server, ids, hours=5) == ids
    assert await kept(server, ids, hours=7) == ids[2:]


async def test_open_runs_are_never_purged(stub: sg.WorkflowServiceStub, server: Server) -> None:
    wf = Driver(stub)
    await wf.start()
    await wf.decide(await wf.poll_decision(), retention("disabled"))
    assert await kept(server, [wf.workflow_id], hours=24 * 365) == [wf.workflow_id]


async def test_the_namespace_default_is_what_system_means(
    stub: sg.WorkflowServiceStub, server: Server, admin: ag.AdminServiceStub
) -> None:
    ns = unique("ns")
    described = await admin.DescribeNamespace(a.DescribeNamespaceRequest(name=ns))
    assert (described.retention, described.registered) == ("3", False)
    await admin.RegisterNamespace(a.RegisterNamespaceRequest(name=ns, retention="1"))
    described = await admin.DescribeNamespace(a.DescribeNamespaceRequest(name=ns))
    assert (described.retention, described.registered) == ("1", True)

    wtype = unique("type")
    ids = [await closed_run(stub, wtype, namespace=ns) for _ in range(3)]
    store = server._store
    assert store is not None
    await store.purge_closed(utcnow() + timedelta(hours=1))
    left = []
    for wid in ids:
        try:
            await store.find_run(ns, wid)
            left.append(wid)
        except Exception:
            pass
    assert left == ids[2:]


async def test_bad_namespace_retention_is_refused(admin: ag.AdminServiceStub) -> None:
    for bad in ("soon", "parent", "max(context, 1)"):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await admin.RegisterNamespace(a.RegisterNamespaceRequest(name="x", retention=bad))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_bad_retention_marker_fails(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    await wf.decide(await wf.poll_decision(), retention("whenever"))
    failed = [e.marker_failed for e in await wf.history() if e.type == "MarkerFailed"]
    assert [(f.marker_name, f.cause) for f in failed] == [("retention", "INVALID_RETENTION")]


async def test_family_ties_keep_runs(stub: sg.WorkflowServiceStub, server: Server) -> None:
    """A closed parent with an open child stays; a closed child of a kept parent stays."""
    parent = Driver(stub)
    await parent.start()
    open_kid, done_kid = unique("kid"), unique("kid")
    await parent.decide(
        await parent.poll_decision(),
        retention("disabled"),
        *(
            d.Decision(
                start_child_workflow=d.StartChildWorkflowDecision(
                    workflow_id=kid,
                    workflow_type=c.WorkflowType(name="kid"),
                    task_list=kid,
                    parent_close_policy=d.PARENT_CLOSE_POLICY_ABANDON,
                )
            )
            for kid in (open_kid, done_kid)
        ),
    )
    kid = Driver(stub)
    kid.workflow_id, kid.task_list = done_kid, done_kid
    await kid.decide(await kid.poll_decision(), retention("disabled"), complete())
    await stub.TerminateWorkflow(
        s.TerminateWorkflowRequest(execution=c.WorkflowExecution(workflow_id=parent.workflow_id))
    )
    ids = [parent.workflow_id, done_kid, open_kid]
    assert await kept(server, ids, hours=24) == ids  # the open child holds its parent
    await stub.TerminateWorkflow(
        s.TerminateWorkflowRequest(execution=c.WorkflowExecution(workflow_id=open_kid))
    )
    # The open child's end lets the family go (its parent's disabled policy is its own).
    assert await kept(server, ids, hours=24) == []


async def test_a_run_just_closed_is_kept_for_its_waiting_clients(
    stub: sg.WorkflowServiceStub, server: Server
) -> None:
    wtype = unique("type")
    ids = [await closed_run(stub, wtype, "1") for _ in range(3)]
    assert await kept(server, ids, hours=0.1) == ids  # six minutes: all there
    assert await kept(server, ids, hours=0.2) == ids[2:]  # twelve: the policy applies
    gone = await closed_run(stub, wtype, "disabled")
    assert await kept(server, [gone], hours=0) == []  # unless it asked not to be kept


async def test_purged_runs_leave_no_history(
    stub: sg.WorkflowServiceStub, server: Server, db_url: str
) -> None:
    wid = await closed_run(stub, unique("type"), "disabled")
    engine = create_engine(migrate.sync_url(db_url))
    with engine.connect() as conn:
        run_id = conn.scalar(select(runs.c.run_id).where(runs.c.workflow_id == wid))
    assert await kept(server, [wid], hours=0) == []
    with engine.connect() as conn:
        left = conn.scalar(
            select(history_events.c.event_id).where(history_events.c.run_id == run_id)
        )
    engine.dispose()
    assert left is None


async def test_a_retried_start_after_the_purge_starts_nothing(
    stub: sg.WorkflowServiceStub, server: Server
) -> None:
    wf = Driver(stub)
    request = s.StartWorkflowRequest(
        workflow_id=wf.workflow_id,
        workflow_type=c.WorkflowType(name=unique("type")),
        task_list=wf.task_list,
        request_id=unique("req"),
    )
    first = await stub.StartWorkflow(request)
    await wf.decide(await wf.poll_decision(), retention("disabled"), complete())
    assert await kept(server, [wf.workflow_id], hours=0) == []
    again = await stub.StartWorkflow(request)  # the same request, retried late
    assert again.run_id == first.run_id
    assert await kept(server, [wf.workflow_id], hours=0) == []  # no second run

"""Looking over a namespace page by page (the web UI's reads), through the real
gRPC server on both databases: runs under every filter with their counts per
status, task lists with backlog and pollers, a history from any event; bad
requests refused with INVALID_ARGUMENT."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

import grpc
import pytest

from orchestrator.server import Server
from sdk import AsyncClient
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, unique


@pytest.fixture
async def client(server: Server) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(f"127.0.0.1:{server.port}", namespace=unique("vis")) as it:
        yield it


async def started(
    stub: sg.WorkflowServiceStub, namespace: str, workflow_id: str, task_list: str = ""
) -> Driver:
    wf = Driver(stub, namespace)
    wf.workflow_id = workflow_id
    if task_list:
        wf.task_list = task_list
    await wf.start()
    return wf


async def test_runs_filtered_counted_and_paged(
    stub: sg.WorkflowServiceStub, client: AsyncClient
) -> None:
    ns = client.namespace
    # Each start is answered before the next is sent: their start times are in this order.
    alpha1 = await started(stub, ns, "alpha-1", "tl-a")
    await started(stub, ns, "alpha-2", "tl-b")
    await started(stub, ns, "ALPHA-3", "tl-a")  # the prefix is exact: not case-folded
    await started(stub, ns, "a%b")  # nor a LIKE pattern
    beta = await started(stub, ns, "beta-1", "tl-a")
    await alpha1.decide(await alpha1.poll_decision(), complete("done"))
    await client.terminate("beta-1", reason="test")

    async def ids(**filters: object) -> list[str]:
        page = await client.list_page(**filters)  # type: ignore[arg-type]
        return [r.workflow_id for r in page.runs]

    assert await ids(workflow_id_prefix="alpha-") == ["alpha-2", "alpha-1"]
    assert await ids(workflow_id_prefix="a%") == ["a%b"]
    assert await ids(workflow_id_prefix="a_") == []
    assert await ids(status="completed") == ["alpha-1"]
    assert await ids(status="terminated") == ["beta-1"]
    assert await ids(status="closed") == ["beta-1", "alpha-1"]
    assert set(await ids(status="open")) == {"alpha-2", "ALPHA-3", "a%b"}
    assert await ids(task_list="tl-a", status="open") == ["ALPHA-3"]
    assert await ids(workflow_type="nothing-of-the-kind") == []

    counts = await client.count_workflows()
    assert counts == {"open": 3, "completed": 1, "terminated": 1}
    assert await client.count_workflows(task_list="tl-a") == {
        "open": 1,
        "completed": 1,
        "terminated": 1,
    }
    assert await client.count_workflows(workflow_id_prefix="beta") == {"terminated": 1}

    # The start-time range: inclusive from, exclusive to.
    every = (await client.list_page(page_size=100)).runs
    assert [r.workflow_id for r in every][-1] == "alpha-1"
    first_start = every[-1].start_time
    assert first_start is not None
    assert "alpha-1" not in await ids(started_after=first_start + timedelta(microseconds=1))
    assert await ids(started_before=first_start + timedelta(microseconds=1)) == ["alpha-1"]
    later = await client.count_workflows(started_after=datetime.now(UTC) + timedelta(hours=1))
    assert later == {}

    # Paging two at a time gives every run once, newest first.
    seen: list[str] = []
    token = b""
    while True:
        page = await client.list_page(page_size=2, page_token=token)
        seen += [r.workflow_id for r in page.runs]
        token = page.next_page_token
        if not token:
            break
    assert seen == [r.workflow_id for r in every]
    assert len(seen) == 5
    assert beta.run_id in {r.run_id for r in every}


async def test_task_lists_show_backlog_oldest_task_and_pollers(
    stub: sg.WorkflowServiceStub, client: AsyncClient
) -> None:
    ns = client.namespace
    before = datetime.now(UTC) - timedelta(seconds=1)
    await started(stub, ns, "waits-1", "unpolled")
    await started(stub, ns, "waits-2", "unpolled")
    polled = await started(stub, ns, "polled-1", "polled")
    await polled.decide(await polled.poll_decision(), complete())

    page = await client.list_task_lists()
    assert not page.truncated
    lists = {(t.kind, t.name): t for t in page.task_lists}
    waiting = lists[("decision", "unpolled")]
    assert waiting.backlog == 2 and waiting.pollers == []
    assert waiting.oldest_task_time is not None and waiting.oldest_task_time >= before
    seen = lists[("decision", "polled")]
    assert seen.backlog == 0 and seen.oldest_task_time is None
    assert [p.identity for p in seen.pollers] == ["decider-1"]
    assert ("activity", "unpolled") not in lists


async def test_history_from_any_event(stub: sg.WorkflowServiceStub, client: AsyncClient) -> None:
    wf = await started(stub, client.namespace, "long-1")
    for i in range(5):
        await client.signal("long-1", f"s{i}")
    everything = await wf.history()
    page = await client.history_page("long-1", first_event_id=3, page_size=2)
    assert [e.event_id for e in page.events] == [3, 4]
    assert page.next_event_id == 5 and page.run_id == wf.run_id
    rest = await client.history_page("long-1", first_event_id=5)
    assert [e.event_id for e in rest.events] == [e.event_id for e in everything][4:]
    assert rest.next_event_id == 0
    past = await client.history_page("long-1", first_event_id=len(everything) + 1)
    assert past.events == [] and past.next_event_id == 0


async def test_bad_visibility_requests_are_invalid_argument(
    stub: sg.WorkflowServiceStub, client: AsyncClient
) -> None:
    await started(stub, client.namespace, "x-1")
    execution = c.WorkflowExecution(workflow_id="x-1")
    bad: list[tuple[str, object]] = [
        ("ListWorkflows", s.ListWorkflowsRequest(namespace=client.namespace, status=99)),
        (
            "GetWorkflowHistory",
            s.GetWorkflowHistoryRequest(
                namespace=client.namespace, execution=execution, first_event_id=-1
            ),
        ),
        ("CountWorkflows", s.CountWorkflowsRequest(namespace="", task_list="a\x01b")),
        ("ListTaskLists", s.ListTaskListsRequest(namespace="*")),
    ]
    for method, request in bad:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await getattr(stub, method)(request)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
        assert err.value.details(), method
    with pytest.raises(ValueError, match="status must be"):
        await client.list_page(status="sideways")
    far = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))
    with pytest.raises(ValueError, match="between 1970 and 9999"):
        await client.list_page(started_after=far)

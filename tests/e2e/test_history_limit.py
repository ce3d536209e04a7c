"""Near the per-run event limit the decider is told to continue as new; past it
only a close decision is accepted (CONTRACT.md "Limits")."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from orchestrator.config import ServerConfig
from orchestrator.engine.limits import Limits
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.e2e.api_calls import serving
from tests.helpers import Driver, payload, schedule

LIMIT = 20


@pytest.fixture
async def small_stub(db_url: str) -> AsyncIterator[sg.WorkflowServiceStub]:
    config = ServerConfig(
        db_url=db_url, listen="127.0.0.1:0", long_poll=2.0, limits=Limits(events_per_run=LIMIT)
    )
    async with serving(config) as stub:
        yield stub


def _marker(n: int) -> d.Decision:
    return d.Decision(record_marker=d.RecordMarkerDecision(marker_name=f"m{n}", details=payload(n)))


async def test_decider_is_told_to_continue_as_new_and_only_a_close_is_accepted(
    small_stub: sg.WorkflowServiceStub,
) -> None:
    wf = Driver(small_stub)
    await wf.start()
    task = await wf.poll_decision()
    assert not task.continue_as_new_suggested
    # Grow the history: each turn is a signal plus four decider events and a marker.
    n = 0
    while task.started_event_id < 0.9 * LIMIT:
        n += 1
        await wf.decide(task, _marker(n))
        await small_stub.SignalWorkflow(
            s.SignalWorkflowRequest(execution={"workflow_id": wf.workflow_id}, signal_name="grow")
        )
        task = await wf.poll_decision()
    assert task.continue_as_new_suggested

    before = await wf.types()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await wf.decide(task, *[schedule(f"a{i}", "work", "tl") for i in range(3)])
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(LIMIT) in (refused.value.details() or "")
    assert await wf.types() == before

    await wf.decide(
        task,
        d.Decision(continue_as_new=d.ContinueAsNewDecision(input=payload({"from": n}))),
    )
    events = await wf.history()
    assert events[-1].type == "WorkflowContinuedAsNew"
    successor = await wf.poll_decision()
    assert successor.workflow_execution.run_id == events[-1].workflow_continued_as_new.new_run_id
    assert not successor.continue_as_new_suggested

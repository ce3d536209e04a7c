"""A signal between workflows respects the receiving run's limits: refused with
SIGNAL_LIMIT_EXCEEDED (the sender's decision fails, nothing else does)."""

from __future__ import annotations

import pytest

from orchestrator.config import ServerConfig
from orchestrator.engine.limits import Limits
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete


@pytest.fixture
def server_config(db_url: str) -> ServerConfig:
    return ServerConfig(
        db_url=db_url, listen="127.0.0.1:0", long_poll=3.0, limits=Limits(signals_per_run=2)
    )


def signal_to(workflow_id: str) -> d.Decision:
    return d.Decision(
        signal_external_workflow=d.SignalExternalWorkflowDecision(
            execution=c.WorkflowExecution(workflow_id=workflow_id), signal_name="ping"
        )
    )


async def test_a_full_receiver_refuses_and_the_sender_goes_on(
    stub: sg.WorkflowServiceStub,
) -> None:
    full, sender = Driver(stub), Driver(stub)
    await full.start()
    await sender.start()
    for _ in range(2):
        await stub.SignalWorkflow(
            s.SignalWorkflowRequest(
                execution=c.WorkflowExecution(workflow_id=full.workflow_id), signal_name="x"
            )
        )
    await sender.decide(await sender.poll_decision(), signal_to(full.workflow_id))
    [failed] = [e for e in await sender.history() if e.type == "SignalExternalWorkflowFailed"]
    assert failed.signal_external_workflow_failed.cause == "SIGNAL_LIMIT_EXCEEDED"
    # A self-signal past the limit is refused the same way.
    me = sender.workflow_id
    await sender.decide(await sender.poll_decision(), signal_to(me), signal_to(me))  # 2 of 2
    await sender.decide(await sender.poll_decision(), signal_to(me), complete())
    causes = [
        e.signal_external_workflow_failed.cause
        for e in await sender.history()
        if e.type == "SignalExternalWorkflowFailed"
    ]
    assert causes == ["SIGNAL_LIMIT_EXCEEDED", "SIGNAL_LIMIT_EXCEEDED"]
    # Like any refused decision, it holds the close back until the decider saw it.
    assert "WorkflowCloseFailed" in await sender.types()
    await sender.decide(await sender.poll_decision(), complete())
    assert (await sender.types())[-1] == "WorkflowSuccess"

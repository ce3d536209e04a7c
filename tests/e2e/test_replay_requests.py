"""The service's half of `weft replay`, through the real gRPC server on both
databases: an open run gets a ReplayRequested event; a run that ended badly is
replayed as a new run of the same workflow id, linked both ways, its own history
untouched; what cannot be replayed is refused and changes nothing. (What the
step interpreter does with the request: tests/steps.)"""

from __future__ import annotations

import grpc
import pytest

from orchestrator.server import Server
from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, payload


@pytest.fixture
async def admin(server: Server) -> ag.AdminServiceStub:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield ag.AdminServiceStub(channel)
    await channel.close()


def replay(
    wf: Driver, mode: str = "resuming", run_id: str = "", **fields: object
) -> a.ReplayWorkflowRequest:
    fields.setdefault("point", payload({"index": 2, "resume": False}))
    return a.ReplayWorkflowRequest(
        execution=c.WorkflowExecution(workflow_id=wf.workflow_id, run_id=run_id),
        mode=mode,
        identity="ops@host",
        reason="try again",
        **fields,
    )


class StepRun(Driver):
    """A run of a type registered with a step definition (the service only checks
    that there is one: replays are for step workflows)."""

    async def start(self, **fields: object) -> str:
        await self.stub.RegisterWorkflowType(
            s.RegisterWorkflowTypeRequest(
                workflow_type=c.WorkflowType(name="order"),
                default_task_list="orders",
                definition="name: order\nsteps:\n  - return ok\n",
            )
        )
        return await super().start(**fields)


async def describe(wf: Driver, run_id: str = "") -> s.DescribeWorkflowResponse:
    return await wf.stub.DescribeWorkflow(
        s.DescribeWorkflowRequest(
            execution=c.WorkflowExecution(workflow_id=wf.workflow_id, run_id=run_id)
        )
    )


async def test_an_open_run_replays_in_place(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    wf = StepRun(stub)
    await wf.start()
    await wf.decide(await wf.poll_decision())
    resp = await admin.ReplayWorkflow(replay(wf, "from", step="check", force=True))
    assert (resp.run_id, resp.new_run) == (wf.run_id, False)
    assert (await wf.types())[-2:] == ["ReplayRequested", "DeciderScheduled"]
    event = next(e for e in await wf.history() if e.type == "ReplayRequested").replay_requested
    assert (event.mode, event.step, event.force, event.identity, event.reason) == (
        "from",
        "check",
        True,
        "ops@host",
        "try again",
    )
    assert event.point.data == b'{"index": 2, "resume": false}'


@pytest.mark.parametrize("ending", ["failed", "terminated"])
async def test_a_run_that_ended_badly_replays_as_a_new_run(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub, ending: str
) -> None:
    wf = StepRun(stub)
    await wf.start()
    task = await wf.poll_decision()
    if ending == "failed":
        await wf.decide(task, d.Decision(fail_workflow=d.FailWorkflowDecision(reason="boom")))
    else:
        await stub.TerminateWorkflow(
            s.TerminateWorkflowRequest(execution=c.WorkflowExecution(workflow_id=wf.workflow_id))
        )
    old_run, old_history = wf.run_id, await wf.history()

    resp = await admin.ReplayWorkflow(replay(wf, "last"))
    assert resp.new_run and resp.run_id != old_run
    assert await wf.history() == old_history  # the old run is as it was

    new = Driver(stub)
    new.workflow_id, new.run_id, new.task_list = wf.workflow_id, resp.run_id, wf.task_list
    events = await new.history()
    assert [e.type for e in events] == ["WorkflowStarted", "ReplayRequested", "DeciderScheduled"]
    started, old_started = events[0].workflow_started, old_history[0].workflow_started
    assert started.replay_of_run_id == old_run
    assert (started.workflow_type, started.task_list, started.input) == (
        old_started.workflow_type,
        old_started.task_list,
        old_started.input,
    )
    assert events[1].replay_requested.replay_of_run_id == old_run
    assert (await describe(wf, old_run)).info.replayed_by_run_id == resp.run_id
    assert (await describe(wf)).info.replay_of_run_id == old_run
    assert (await new.poll_decision()).task_token  # its decider gets to work

    # Replayed once: a second replay of the old run is refused.
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.ReplayWorkflow(replay(wf, "last", run_id=old_run))
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS


async def test_what_cannot_be_replayed_is_refused(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    done = StepRun(stub)
    await done.start()
    await done.decide(await done.poll_decision(), complete())
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.ReplayWorkflow(replay(done))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "completed" in (info.value.details() or "")

    failed = StepRun(stub)
    await failed.start()
    task = await failed.poll_decision()
    await failed.decide(task, d.Decision(fail_workflow=d.FailWorkflowDecision(reason="x")))
    old_run = failed.run_id
    await failed.start()  # the workflow id is open again
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.ReplayWorkflow(replay(failed, run_id=old_run))
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS

    before = await failed.types()
    for bad in (
        replay(failed, "sideways"),
        replay(failed, "from"),
        replay(failed, "last", step="x"),
        a.ReplayWorkflowRequest(mode="last"),
        a.ReplayWorkflowRequest(  # no point: nothing resolved it
            execution=c.WorkflowExecution(workflow_id=failed.workflow_id), mode="last"
        ),
        replay(failed, "last", point=payload({"index": -1, "resume": False})),
        replay(failed, "last", point=payload("somewhere")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await admin.ReplayWorkflow(bad)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert await failed.types() == before

    with pytest.raises(grpc.aio.AioRpcError) as info:
        missing = a.ReplayWorkflowRequest(
            execution=c.WorkflowExecution(workflow_id="nobody"),
            mode="last",
            point=payload({"index": 0, "resume": False}),
        )
        await admin.ReplayWorkflow(missing)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_only_step_workflows_replay(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub
) -> None:
    wf = Driver(stub)  # a type decided by code: no definition
    await wf.start()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await admin.ReplayWorkflow(replay(wf))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "not a step workflow" in (info.value.details() or "")

"""Worker sessions under authentication: a worker narrowed to some task lists
cannot heartbeat or end a session of other lists (which would time out that
worker's tasks), and lists only the sessions of its own lists."""

from __future__ import annotations

import grpc
import pytest

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.e2e.security.auth_matrix_setup import Setup, server_config, setup  # noqa: F401

ACTIVITY = c.TASK_LIST_KIND_ACTIVITY


async def test_a_narrowed_worker_cannot_touch_another_lists_session(
    setup: Setup,  # noqa: F811  (the fixture imported above)
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        theirs = await stub.RegisterWorker(
            s.RegisterWorkerRequest(
                identity="team-a",
                task_lists=[s.WorkerTaskList(name="tl-a", kind=ACTIVITY)],
            ),
            metadata=setup.metadata("worker"),
        )
        session = theirs.worker_session_id
        narrowed = setup.metadata("worker-tl-b")
        for call in (
            stub.RecordWorkerHeartbeat(
                s.RecordWorkerHeartbeatRequest(worker_session_id=session), metadata=narrowed
            ),
            stub.UnregisterWorker(
                s.UnregisterWorkerRequest(worker_session_id=session), metadata=narrowed
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        listed = await stub.ListWorkers(s.ListWorkersRequest(), metadata=narrowed)
        assert [w.identity for w in listed.workers] == []
        # The session is untouched: its owner still beats, and sees itself.
        await stub.RecordWorkerHeartbeat(
            s.RecordWorkerHeartbeatRequest(worker_session_id=session),
            metadata=setup.metadata("worker"),
        )
        listed = await stub.ListWorkers(s.ListWorkersRequest(), metadata=setup.metadata("worker"))
        assert [(w.identity, w.status) for w in listed.workers] == [("team-a", "live")]

"""The retention purge runs on one node at a time: on PostgreSQL a node that
finds the purge lock taken does nothing (SQLite has one writer anyway)."""

from __future__ import annotations

import grpc
import pytest
from sqlalchemy import create_engine, text

from orchestrator.server import Server
from orchestrator.store import migrate
from orchestrator.store.purge import PURGE_LOCK_KEY
from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import unique
from tests.store.test_retention_purge import admin, closed_run

__all__ = ["admin"]


@pytest.fixture
def db_url(postgres_url: str) -> str:
    return postgres_url


async def test_one_node_purges_at_a_time(
    stub: sg.WorkflowServiceStub, admin: ag.AdminServiceStub, server: Server
) -> None:
    wid = await closed_run(stub, unique("type"), "disabled")
    engine = create_engine(migrate.sync_url(server.config.db_url))
    with engine.connect() as other_node:
        other_node.execute(text("SELECT pg_advisory_lock(:k)"), {"k": PURGE_LOCK_KEY})
        busy = await admin.PurgeClosedRuns(a.PurgeClosedRunsRequest())
        assert (busy.ran, busy.purged) == (False, 0)
        other_node.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": PURGE_LOCK_KEY})
    engine.dispose()
    done = await admin.PurgeClosedRuns(a.PurgeClosedRunsRequest())
    assert done.ran and done.purged >= 1
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.DescribeWorkflow(
            s.DescribeWorkflowRequest(execution=c.WorkflowExecution(workflow_id=wid))
        )

"""What the tests of a client going away mid-write share (on PostgreSQL,
`test_group_commit`; on SQLite, `test_sqlite_gone_client`): signals sent and
counted, and a spy on `Pending.seen`, where a handler waits for its write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.store.pending import Pending
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, payload


async def signal(stub: sg.WorkflowServiceStub, run: Driver, name: str) -> None:
    await stub.SignalWorkflow(
        s.SignalWorkflowRequest(
            namespace="default",
            execution=c.WorkflowExecution(workflow_id=run.workflow_id),
            signal_name=name,
            input=payload(run.workflow_id),
        )
    )


async def signals(run: Driver, name: str) -> int:
    """How many signals of that name the run's history holds."""
    return sum(
        1 for e in await run.history() if e.HasField("signal") and e.signal.signal_name == name
    )


class SeenThrough:
    """The handlers' tasks that waited for a write (`Pending.seen`), and for
    each, whether it was cancelled meanwhile and saw the write through anyway."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.waiting: list[asyncio.Task[Any]] = []
        self.cancelled: list[bool] = []
        real_seen = Pending.seen

        async def seen(pending: Pending[Any]) -> tuple[Any, bool]:
            task = asyncio.current_task()
            assert task is not None
            self.waiting.append(task)
            outcome = await real_seen(pending)
            self.cancelled.append(outcome[1])
            return outcome

        monkeypatch.setattr(Pending, "seen", seen)

    async def handler_cancelled(self) -> bool:
        """Whether a handler waiting for its write has been cancelled."""
        return any(task.cancelling() for task in self.waiting)

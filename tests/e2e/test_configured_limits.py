"""The per-run limits set on `weft server` (CONTRACT.md "Limits (defaults,
configurable)"): a real server process started with each set below its default
refuses what goes past it, naming the limit, and appends nothing; what stays
within it is taken. Both databases."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.cli.support import raw_weft
from tests.helpers import Driver, dur, payload, schedule, unique
from tests.serverproc import ServerProcess, free_port

LIMITS = (
    "--max-payload-size",
    "64KiB",
    "--max-pending-activities",
    "2",
    "--max-pending-timers",
    "1",
    "--max-signals-per-run",
    "2",
    "--max-history-events",
    "1000",
)


@pytest.fixture
async def stub(db_url: str, tmp_path: Path) -> AsyncIterator[sg.WorkflowServiceStub]:
    node = ServerProcess(db_url, tmp_path, name="limits", extra_args=LIMITS)
    await node.start()
    try:
        async with node.channel() as channel:
            yield sg.WorkflowServiceStub(channel)
    finally:
        node.stop()


async def refused(call: object, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call  # type: ignore[misc]
    assert err.value.code() == code, err.value.details()
    return err.value.details() or ""


async def history_length(wf: Driver) -> int:
    history = await wf.stub.GetWorkflowHistory(
        s.GetWorkflowHistoryRequest(execution=c.WorkflowExecution(workflow_id=wf.workflow_id))
    )
    return len(history.events)


async def test_a_payload_past_the_set_size_is_refused(stub: sg.WorkflowServiceStub) -> None:
    def start(size: int) -> object:
        return stub.StartWorkflow(
            s.StartWorkflowRequest(
                workflow_id=unique("big"),
                workflow_type=c.WorkflowType(name="order"),
                task_list="tl",
                input=payload("x" * size),  # (and its JSON quotes)
            )
        )

    details = await refused(start(64 * 1024), grpc.StatusCode.INVALID_ARGUMENT)
    assert "the payload limit is 65536 bytes" in details, details
    await start(60 * 1024)  # type: ignore[misc]  (within it: taken)


async def test_decisions_past_the_set_counts_are_refused(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    task = await wf.poll_decision()
    before = await history_length(wf)
    three = [schedule(f"a{i}", "work", "tl-work") for i in range(3)]
    details = await refused(wf.decide(task, *three), grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "more than 2 pending activities" in details, details
    timers = [
        d.Decision(
            start_timer=d.StartTimerDecision(timer_id=f"t{i}", start_to_fire_timeout=dur(60))
        )
        for i in range(2)
    ]
    details = await refused(wf.decide(task, *timers), grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "more than 1 pending timers" in details, details
    markers = [
        d.Decision(record_marker=d.RecordMarkerDecision(marker_name=f"m{i}")) for i in range(1000)
    ]
    details = await refused(wf.decide(task, *markers), grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "the limit is 1000" in details, details
    assert await history_length(wf) == before  # nothing appended
    await wf.decide(task, *three[:2])  # within them: taken


async def test_signals_past_the_set_count_are_refused(stub: sg.WorkflowServiceStub) -> None:
    wf = Driver(stub)
    await wf.start()
    execution = c.WorkflowExecution(workflow_id=wf.workflow_id)
    for _ in range(2):
        await stub.SignalWorkflow(s.SignalWorkflowRequest(execution=execution, signal_name="go"))
    third = stub.SignalWorkflow(s.SignalWorkflowRequest(execution=execution, signal_name="go"))
    details = await refused(third, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "the limit is 2 per run" in details, details


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--max-payload-size", "4MiB", "4MiB is not from 64KiB to 2MiB"),
        ("--max-payload-size", "12XB", "'12XB' is not a size: give bytes, or KiB / MiB (256KiB)"),
        ("--max-pending-timers", "0", "0 is not in the range 1<=x<=10000."),
        (
            "--max-payload-size",
            "9" * 5000,
            f"'{'9' * 40}…' is not a size: give bytes, or KiB / MiB (256KiB)",
        ),
    ],
)
def test_a_limit_out_of_its_range_is_refused(
    tmp_path: Path, flag: str, value: str, said: str
) -> None:
    db = tmp_path / "never.db"
    address = f"127.0.0.1:{free_port()}"
    done = raw_weft("server", "--db", f"sqlite:///{db}", "--listen", address, flag, value)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"weft server: Invalid value for '{flag}': {said}", done.stderr
    assert not db.exists()

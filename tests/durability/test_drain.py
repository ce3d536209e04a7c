"""SIGTERM drains a node: waiting polls are answered empty (not cut off with an
error), acknowledged work stays, and the process exits cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, unique, wait_until
from tests.serverproc import ServerProcess


async def test_sigterm_answers_waiting_polls_empty_and_exits_zero(
    db_url: str, tmp_path: Path
) -> None:
    node = ServerProcess(db_url, tmp_path, long_poll="60s")
    await node.start()
    try:
        async with node.channel() as channel:
            stub = sg.WorkflowServiceStub(channel)
            wf = Driver(stub)
            await wf.start()
            await wf.decide(await wf.poll_decision())  # acknowledged before the drain

            idle = unique("idle")
            poll = asyncio.ensure_future(
                stub.PollForActivityTask(
                    s.PollForActivityTaskRequest(task_list=idle, identity="r"), timeout=90
                )
            )

            async def poller_registered() -> bool:
                resp = await stub.DescribeTaskList(
                    s.DescribeTaskListRequest(task_list=idle, kind=c.TASK_LIST_KIND_ACTIVITY)
                )
                return len(resp.pollers) == 1

            await wait_until(poller_registered)
            code = await node.terminate()
            answer = await poll  # an empty answer, not UNAVAILABLE or CANCELLED
            assert not answer.task_token
            assert code == 0, node.log_tail()

        await node.start()
        async with node.channel() as channel:
            wf.stub = sg.WorkflowServiceStub(channel)
            assert await wf.types() == [
                "WorkflowStarted",
                "DeciderScheduled",
                "DeciderStarted",
                "DeciderCompleted",
            ]
    finally:
        node.stop()


async def test_signals_that_keep_coming_do_not_change_a_clean_exit(
    tmp_path: Path,
) -> None:
    """SIGTERM after SIGTERM, through the drain and the exit: the process ends
    with its own status (0), never with the signal's (before, one that came
    just after the event loop closed ended it with -15)."""
    for attempt in range(3):
        directory = tmp_path / str(attempt)
        directory.mkdir()
        node = ServerProcess(f"sqlite:///{directory / 'weft.db'}", directory)
        await node.start()
        assert node.proc is not None
        proc = node.proc
        try:
            while proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.001)
        finally:
            node.stop()
        assert proc.returncode == 0, node.log_tail()

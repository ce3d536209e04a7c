"""A stop while a worker's answer waits in its folded poll, against a stand-in
connection whose response the test hands over: the call is cut short once,
the answer is sent again alone, and the lane is left uncancelled; a response
already in is kept; a cancellation of the lane itself still ends it.

(The same paths against a real server: tests/sdk/test_e2e_worker_folds.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdk import ActivityWorker, AsyncClient
from sdk.api.weft.v1 import service_pb2 as s
from sdk.errors import NotFoundError
from sdk.worker import Lane

NOTHING = "nothing"


class Connection:
    """The lane's connection: its folded call waits for the test to set `response`."""

    def __init__(self, *, swallow_cancel: bool = False) -> None:
        self.response: asyncio.Future[str] | None = None
        self.called = asyncio.Event()
        self.swallow_cancel = swallow_cancel

    async def rpc(self, method: str, req: Any, **_: Any) -> str:
        self.response = asyncio.get_running_loop().create_future()
        self.called.set()
        try:
            return await self.response
        except asyncio.CancelledError:
            if not self.swallow_cancel:
                raise
            return "finished despite the cancel"


class Client:
    """The worker's own client: an answer sent again alone finds it written."""

    def __init__(self) -> None:
        self.sent_alone = 0

    async def rpc(self, method: str, req: Any, **_: Any) -> str:
        self.sent_alone += 1
        raise NotFoundError("the task is already answered")


@pytest.fixture
async def worker() -> Any:
    async with AsyncClient("127.0.0.1:1") as real:  # (never called: replaced below)
        w = ActivityWorker(real, task_lists=["stand-in"], activities=[])
        w._stop, w._force = asyncio.Event(), asyncio.Event()
        w.client = Client()  # type: ignore[assignment]
        yield w


async def _answering(worker: ActivityWorker, conn: Connection) -> asyncio.Task[Any]:
    lane = Lane("stand-in", conn)  # type: ignore[arg-type]
    req = s.RespondActivityTaskCompletedRequest(task_token=b"t")
    task = asyncio.ensure_future(
        worker._answer_folded(lane, "RespondActivityTaskCompleted", req, lambda: NOTHING)
    )
    await conn.called.wait()
    return task


async def test_a_stop_cuts_the_call_short_and_sends_the_answer_again_alone(worker: Any) -> None:
    answering = await _answering(worker, conn := Connection())
    worker._request_stop()
    assert await answering == NOTHING
    assert worker.client.sent_alone == 1
    assert answering.cancelling() == 0 and not worker._folding
    assert conn.response is not None and conn.response.cancelled()


async def test_a_response_already_in_is_kept_at_a_stop(worker: Any) -> None:
    answering = await _answering(worker, conn := Connection())
    assert conn.response is not None
    conn.response.set_result("with the next task")
    worker._request_stop()  # (the lane has not resumed yet)
    assert await answering == "with the next task"
    assert worker.client.sent_alone == 0 and answering.cancelling() == 0


async def test_a_second_stop_does_not_cut_twice(worker: Any) -> None:
    answering = await _answering(worker, Connection())
    worker._request_stop()
    worker._request_stop()
    await asyncio.sleep(0)
    worker._request_stop()
    assert await answering == NOTHING
    assert worker.client.sent_alone == 1 and answering.cancelling() == 0


async def test_a_lane_cancelled_otherwise_ends_without_sending_again(worker: Any) -> None:
    answering = await _answering(worker, Connection())
    answering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await answering
    assert worker.client.sent_alone == 0 and not worker._folding


async def test_a_cancel_of_the_lane_beside_the_stop_is_not_taken_back(worker: Any) -> None:
    """The call swallows the stop's cancellation and returns: the drain's own
    cancel of the lane, made meanwhile, still ends the lane."""
    answering = await _answering(worker, Connection(swallow_cancel=True))
    worker._request_stop()
    await asyncio.sleep(0)  # (the stop's cut is made a loop turn later)
    answering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await answering
    assert worker.client.sent_alone == 0

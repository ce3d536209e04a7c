"""The decider's run cache: it weighs each run by its events' bytes as the
server sent them, makes room by the least recently used run when it weighs
too much, and keeps no run its task closed."""

from __future__ import annotations

from typing import Any

import pytest

from sdk import AsyncClient, DeciderWorker, DecisionTask
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.converter import PayloadConverter, PayloadDecodeError
from sdk.decider_cache import CachedRun, RunCache
from tests.helpers import wait_until
from tests.sdk.conftest import make_decider

PAD = "x" * 100_000


def decide(task: DecisionTask) -> None:
    if any(e.type == "Signal" and e.get("signal_name") == "done" for e in task.history):
        task.complete("done")


async def decided(client: AsyncClient, workflow_id: str, tasks: int) -> int:
    """Wait for the run's `tasks`-th DeciderCompleted (or its close); the bytes
    of its events up to that task's DeciderStarted, as the server sends them."""

    async def check() -> list[s.GetWorkflowHistoryResponse]:
        page: s.GetWorkflowHistoryResponse = await client.rpc(
            "GetWorkflowHistory",
            s.GetWorkflowHistoryRequest(
                namespace=client.namespace,
                execution=c.WorkflowExecution(workflow_id=workflow_id),
            ),
        )
        done = [e for e in page.events if e.HasField("decider_completed")]
        return [page] if len(done) >= tasks else []

    [page] = await wait_until(check)
    started = [e.event_id for e in page.events if e.HasField("decider_started")][tasks - 1]
    return sum(e.ByteSize() for e in page.events if e.event_id <= started)


async def test_the_cache_weighs_its_runs_and_keeps_no_closed_one(
    client: AsyncClient, task_list: str
) -> None:
    worker = DeciderWorker(
        client,
        task_lists=[task_list],
        deciders=[make_decider("weighed", decide)],
        concurrency=2,
        cache_bytes=150_000,
    )
    cache = worker.cache
    assert cache is not None
    async with worker:
        a = await client.start_workflow("weighed", task_list=task_list)
        b = await client.start_workflow("weighed", task_list=task_list)
        a_bytes, b_bytes = (
            await decided(client, a.workflow_id, 1),
            await decided(client, b.workflow_id, 1),
        )
        assert (len(cache), cache.bytes) == (2, a_bytes + b_bytes)

        await client.signal(a.workflow_id, "pad", PAD)
        a_bytes = await decided(client, a.workflow_id, 2)
        assert (len(cache), cache.bytes) == (2, a_bytes + b_bytes)
        assert cache.bytes < 150_000

        # B grows past what both may weigh: A, used least recently, leaves.
        await client.signal(b.workflow_id, "pad", PAD)
        b_bytes = await decided(client, b.workflow_id, 2)
        assert (len(cache), cache.bytes) == (1, b_bytes)
        hits, misses = cache.hits, cache.misses

        # A's next task reads its whole history (a miss), and closes it: not kept.
        await client.signal(a.workflow_id, "done")
        assert await client.result(a.workflow_id) == "done"
        assert (len(cache), cache.bytes) == (1, b_bytes)
        await client.signal(b.workflow_id, "done")
        assert await client.result(b.workflow_id) == "done"
        assert (len(cache), cache.bytes) == (0, 0)
        assert (cache.hits, cache.misses) == (hits + 1, misses + 1)


def _run(size: int, started: int = 3) -> CachedRun:
    return CachedRun([], started, size=size)


def test_the_least_recently_kept_run_leaves_first() -> None:
    cache = RunCache(size=3, max_bytes=100)
    for run_id in "abc":
        cache.keep(run_id, _run(30))
    assert (len(cache), cache.bytes) == (3, 90)
    cache.keep("d", _run(10))  # over in runs: a leaves
    assert cache.take("a", 3) is None and (len(cache), cache.bytes) == (3, 70)
    b = cache.take("b", 3)  # taken off while its task runs
    assert b is not None and (len(cache), cache.bytes) == (2, 40)
    b.size = 80
    cache.keep("b", b)  # over in bytes: c leaves, and that is enough
    assert cache.take("c", 3) is None and (len(cache), cache.bytes) == (2, 90)
    cache.forget("b", _run(80))  # another entry of the run is held: it stays
    assert len(cache) == 2
    cache.forget("b", b)
    assert (len(cache), cache.bytes) == (1, 10)
    cache.keep("e", _run(500))  # heavier than the cache: d leaves, e is kept (in use)
    assert (len(cache), cache.bytes) == (1, 500)
    assert cache.take("e", 2) is None and cache.bytes == 0  # held as of another task


def test_a_cache_of_no_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="bytes must be positive"):
        RunCache(max_bytes=0)


class Garbling(PayloadConverter):
    """A converter that cannot read the string "garbled" (as a decider whose
    converter meets bytes it does not know)."""

    def decode(self, payload: c.Payload | None, type_hint: Any = None) -> Any:
        if payload is not None and payload.data == b'"garbled"':
            raise PayloadDecodeError("not a payload this converter reads")
        return super().decode(payload, type_hint)


async def test_a_history_that_cannot_be_decoded_leaves_the_run_cached(
    client: AsyncClient, address: str, task_list: str
) -> None:
    async with AsyncClient(address, converter=Garbling()) as garbling:
        worker = DeciderWorker(
            garbling,
            task_lists=[task_list],
            deciders=[make_decider("weighed", decide)],
            concurrency=2,
        )
        cache = worker.cache
        assert cache is not None
        async with worker:
            run = await client.start_workflow("weighed", task_list=task_list)
            size = await decided(client, run.workflow_id, 1)
            assert (len(cache), cache.bytes) == (1, size)
            # The task that brings the signal cannot decide; the run stays
            # held as it was, for the task's next attempt.
            await client.signal(run.workflow_id, "garbled", "garbled")

            async def failed() -> bool:
                events = await client.history(run.workflow_id)
                return any(e.type == "DeciderFailed" for e in events)

            await wait_until(failed)

            async def held() -> bool:  # (between attempts: one may have it off now)
                return (len(cache), cache.bytes) == (1, size)

            await wait_until(held)
            assert cache.hits >= 1 and cache.misses == 1  # the first task's miss only

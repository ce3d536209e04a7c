"""The floor of Weft's stack: a grpc.aio server on psycopg that does, per call,
what Weft's hot path cannot do without, and nothing else (run as
`python -m bench.floor PORT DB_URL`, a process of its own like `weft server`).

Weft's workers answer a task and, in the same call, wait for their next one
(folded polls). So every call to the floor server:

1. commits one transition: one prepared single-statement transaction
   (`synchronous_commit` on) that moves a run row on and appends two events,
   like the bench's bare append, on a connection of a small pool;
2. hands the run's next task to a call waiting on the other side (the decision
   side hands to the activity side and back), or queues it there;
3. waits for its own side's next task and returns it.

Requests and responses are the echo's small protobuf. There is no validation,
no engine, no state, no tokens, no metrics: the floor is what the same RPCs and
commits cost on this machine with grpc.aio and psycopg, and Weft's distance
above it is the price of its own code. A Weft activity costs
`weft.rpcs_per_activity` such calls (one on each side, plus starts and the
workflow's last decision); the bench multiplies by that figure of the same run.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import psycopg

from bench.append import PAYLOAD
from sdk.api.weft.v1 import common_pb2

METHOD = "/bench.Floor/Answer"
Message = common_pb2.WorkflowExecution
POOL = 16
SIDES = {"decide": "act", "act": "decide"}
# The statement a transition costs at least: the run row moves on, its events
# are appended, one round trip and one commit (the bench's append tables).
TRANSITION = """
WITH run AS (
    UPDATE append_executions SET next_event_id = next_event_id + 2, version = version + 1
    WHERE id = %s RETURNING id, next_event_id
)
INSERT INTO append_events (run_id, event_id, type, payload)
SELECT id, next_event_id - 2, 'ActivitySuccess', %s FROM run
UNION ALL SELECT id, next_event_id - 1, 'DeciderScheduled', '' FROM run
"""


class FloorServer:
    """Tasks are run numbers; a side is "LOAD:decide" or "LOAD:act", so that
    the runs a finished load left queued never reach the next one."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._slots = asyncio.Semaphore(POOL)
        self._waiting: dict[str, collections.deque[asyncio.Future[int]]] = collections.defaultdict(
            collections.deque
        )
        self._queued: dict[str, collections.deque[int]] = collections.defaultdict(collections.deque)

    async def answer(
        self, request: Message, context: grpc.aio.ServicerContext[Message, Message]
    ) -> Message:
        side, run = request.workflow_id, int(request.run_id)
        if run >= 0:  # below 0: a first poll, with nothing to answer
            await self._commit(run)
            load, _, name = side.partition(":")
            self._hand(f"{load}:{SIDES[name]}", run)
        return Message(workflow_id=side, run_id=str(await self._next(side)))

    async def _commit(self, run: int) -> None:
        async with self._conn() as conn:
            await conn.execute(TRANSITION, (run, PAYLOAD), prepare=True)

    def _hand(self, side: str, run: int) -> None:
        waiting = self._waiting[side]
        while waiting:
            future = waiting.popleft()
            if not future.done():  # (a call the client cancelled is done)
                future.set_result(run)
                return
        self._queued[side].append(run)

    async def _next(self, side: str) -> int:
        if self._queued[side]:
            return self._queued[side].popleft()
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting[side].append(future)
        return await future

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._slots:
            conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, prepare_threshold=0
                )
            try:
                yield conn
            finally:
                self._idle.append(conn)


async def serve(port: int, conninfo: str) -> None:
    floor = FloorServer(conninfo)
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(
        floor.answer,
        request_deserializer=Message.FromString,
        response_serializer=Message.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Floor", {"Answer": handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


@dataclass(frozen=True)
class FloorResult:
    decisions: int  # answer calls (each one commit) completed in the window, by side
    activities: int
    seconds: float
    server_cpu_s: float

    @property
    def calls(self) -> int:
        return self.decisions + self.activities

    @property
    def rate(self) -> float:
        return self.calls / self.seconds

    @property
    def server_cpu_per_call_ms(self) -> float:
        return self.server_cpu_s / self.calls * 1000 if self.calls else float("nan")


_loads = 0


async def load(
    address: str,
    inflight: int,
    seconds: float,
    warmup: float,
    server_cpu: Callable[[], float],
) -> FloorResult:
    """`inflight` runs moving at once, each task answered as soon as it
    arrives by one of `inflight` callers per side; calls completed within the
    counted window (after `warmup`) are counted, and `server_cpu()` is sampled
    at its edges."""
    global _loads
    _loads += 1
    decide, act = f"{_loads}:decide", f"{_loads}:act"
    counted = {decide: 0, act: 0}
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(
            METHOD,
            request_serializer=Message.SerializeToString,
            response_deserializer=Message.FromString,
        )
        start = time.perf_counter()
        measure_from = start + warmup
        stop_at = measure_from + seconds

        async def caller(side: str, run: int) -> None:
            while True:
                reply = await call(Message(workflow_id=side, run_id=str(run)))
                done = time.perf_counter()
                if run >= 0 and measure_from <= done < stop_at:
                    counted[side] += 1
                run = int(reply.run_id)

        callers = [asyncio.create_task(caller(act, -1)) for _ in range(inflight)]
        callers += [asyncio.create_task(caller(decide, n)) for n in range(inflight)]
        await asyncio.sleep(measure_from - time.perf_counter())
        before = server_cpu()
        await asyncio.sleep(stop_at - time.perf_counter())
        cpu = server_cpu() - before
        for task in callers:
            task.cancel()
        results = await asyncio.gather(*callers, return_exceptions=True)
    failures = [r for r in results if not isinstance(r, asyncio.CancelledError)]
    if failures:
        raise RuntimeError(f"the floor server failed a call: {failures[0]!r}")
    return FloorResult(
        decisions=counted[decide], activities=counted[act], seconds=seconds, server_cpu_s=cpu
    )


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), sys.argv[2]))

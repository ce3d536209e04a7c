"""The floor of Weft's stack: a grpc.aio server on psycopg that does, per call,
what Weft's hot path cannot do without, and nothing else (run as
`python -m bench.floor PORT DB_URL`, a process of its own like `weft server`).

Weft's workers answer a task and, in the same call, wait for their next one
(folded polls). So every call to the floor server:

1. commits one transition: one prepared single-statement transaction
   (`synchronous_commit` on) that moves a run row on and appends two events
   (the bench's bare append also writes a task row, in three statements), on a
   connection of a small pool;
2. hands the run's next task to a call waiting on the other side (the decision
   side hands to the activity side and back), or queues it there;
3. waits for its own side's next task and returns it.

Requests and responses are the echo's small protobuf. There is no validation,
no engine, no state, no tokens, no metrics: the floor is what the same RPCs and
commits cost on this machine with grpc.aio and psycopg, and Weft's distance
above it is the price of its own code. A Weft activity costs
`weft.rpcs_per_activity` such calls (one on each side, plus starts and the
workflow's last decision); the bench multiplies by that figure of the same run.

The bench paces the floor's calls to the rate Weft's server answered RPCs in the
same repeat: a grpc.aio server's CPU per call falls as calls come faster (more
of them share each turn of the event loop), so an unpaced floor, three times
faster than Weft, would look cheaper than it is at Weft's rate.
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
from bench.echo import Message, serve_method

METHOD = "/bench.Floor/Answer"
POOL = 16
SIDES = {"decide": "act", "act": "decide"}
FIRST_POLL = -1  # a call with nothing to answer yet: it only waits for a task
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
        if run != FIRST_POLL:
            await self._commit(run)
            load, _, name = side.partition(":")
            self._hand(f"{load}:{SIDES[name]}", run)
        return Message(workflow_id=side, run_id=str(await self._next(side)))

    async def _commit(self, run: int) -> None:
        async with self._conn() as conn:
            cur = await conn.execute(TRANSITION, (run, PAYLOAD), prepare=True)
        if cur.rowcount != 2:  # no such run row: nothing was written
            raise RuntimeError(f"run {run} has no row in append_executions")

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
            if conn is None or conn.closed:
                conn = await psycopg.AsyncConnection.connect(
                    self._conninfo, autocommit=True, prepare_threshold=0
                )
            try:
                yield conn
            except BaseException:
                # A call that failed or was cancelled mid-statement may leave
                # the connection in any state (as Weft's own pool does: drop it).
                await conn.close()
                raise
            if not conn.closed:
                self._idle.append(conn)


async def serve(port: int, conninfo: str) -> None:
    await serve_method(port, METHOD, FloorServer(conninfo).answer)


@dataclass(frozen=True)
class FloorResult:
    decisions: int  # replies to answer calls (each one commit) within the window, by side
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


class Pace:
    """At most `rate` calls a second, spread evenly (None: no limit)."""

    def __init__(self, rate: float | None) -> None:
        self._interval = 1 / rate if rate else 0.0
        self._next = time.perf_counter()

    async def turn(self) -> None:
        if not self._interval:
            return
        now = time.perf_counter()
        slot = max(self._next, now)
        self._next = slot + self._interval
        if slot > now:
            await asyncio.sleep(slot - now)


async def load(
    address: str,
    load_id: str,
    inflight: int,
    seconds: float,
    warmup: float,
    server_cpu: Callable[[], float],
    rate: float | None = None,
) -> FloorResult:
    """`inflight` runs moving at once, each task answered by one of
    `inflight` callers per side as soon as it arrives, or as `rate` (answer
    calls a second, both sides together) allows. Replies within the counted
    window (after `warmup`) are counted, and `server_cpu()` is sampled at its
    edges. `load_id` names this load's sides on the server, so that runs an
    earlier load left queued there never reach this one: give each load its own."""
    decide, act = f"{load_id}:decide", f"{load_id}:act"
    counted = {decide: 0, act: 0}
    pace = Pace(rate)
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
                if run != FIRST_POLL:
                    await pace.turn()
                reply = await call(Message(workflow_id=side, run_id=str(run)))
                done = time.perf_counter()
                if run != FIRST_POLL and measure_from <= done < stop_at:
                    counted[side] += 1
                run = int(reply.run_id)

        callers = [asyncio.create_task(caller(act, FIRST_POLL)) for _ in range(inflight)]
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

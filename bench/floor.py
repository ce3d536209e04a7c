"""The floor of Weft's stack: a grpc.aio server on psycopg that does, per call,
what Weft's hot path cannot do without, and nothing else (run as
`python -m bench.floor PORT DB_URL`, a process of its own like `weft server`).

Weft's workers answer a task and, in the same call, wait for their next one
(folded polls), and send those calls on a stream of their own (lanes). So each
caller here holds one stream, and every call on it (a message written, its
answer read) makes the floor server:

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

Unpaced, the floor answers two and a half to three times as many calls a second
as Weft's server does, and a grpc.aio server's CPU per call depends on how fast calls
come. So the bench runs it twice in each repeat (`figures`): unpaced, and paced
to the RPCs/s Weft's server answered in that repeat, the figure it compares with.
"""

from __future__ import annotations

import asyncio
import collections
import math
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import psycopg

from bench.append import PAYLOAD
from bench.echo import Message
from bench.stats import ratio

METHOD = "/bench.Floor/Lane"
POOL = 16
DECIDE, ACT = "decide", "act"
OTHER_SIDE = {DECIDE: ACT, ACT: DECIDE}
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


def side(load_id: str, name: str) -> str:
    """A load's side on the server, "LOAD_ID:decide" or "LOAD_ID:act": so that
    the runs a finished load left queued never reach the next one."""
    return f"{load_id}:{name}"


class FloorServer:
    """Tasks are run numbers, queued or handed over per side (`side`)."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._slots = asyncio.Semaphore(POOL)
        self._waiting: dict[str, collections.deque[asyncio.Future[int]]] = collections.defaultdict(
            collections.deque
        )
        self._queued: dict[str, collections.deque[int]] = collections.defaultdict(collections.deque)

    async def lane(
        self, requests: AsyncIterator[Message], context: grpc.aio.ServicerContext[Message, Message]
    ) -> None:
        """A caller's stream: each message answered in turn."""
        while isinstance(request := await context.read(), Message):  # (else EOF: its end)
            await context.write(await self.answer(request))

    async def answer(self, request: Message) -> Message:
        own, run = request.workflow_id, int(request.run_id)
        if run != FIRST_POLL:
            await self._commit(run)
            load_id, _, name = own.rpartition(":")
            self._hand(side(load_id, OTHER_SIDE[name]), run)
        return Message(workflow_id=own, run_id=str(await self._next(own)))

    async def _commit(self, run: int) -> None:
        async with self._conn() as conn:
            cur = await conn.execute(TRANSITION, (run, PAYLOAD), prepare=True)
        if cur.rowcount != 2:  # no such run row: nothing was written
            raise RuntimeError(f"run {run} has no row in append_executions")

    def _hand(self, to: str, run: int) -> None:
        waiting = self._waiting[to]
        while waiting:
            future = waiting.popleft()
            if not future.done():  # (a call the client cancelled is done)
                future.set_result(run)
                return
        self._queued[to].append(run)

    async def _next(self, own: str) -> int:
        if self._queued[own]:
            return self._queued[own].popleft()
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting[own].append(future)
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
    service, name = METHOD.strip("/").split("/")
    handler = grpc.stream_stream_rpc_method_handler(
        FloorServer(conninfo).lane,
        request_deserializer=Message.FromString,
        response_serializer=Message.SerializeToString,
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {name: handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


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
        if rate is not None and not (math.isfinite(rate) and rate > 0):  # never unpaced by accident
            raise ValueError(f"a pace must be a positive rate, not {rate}")
        self._interval = 1 / rate if rate is not None else 0.0
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
    decide, act = side(load_id, DECIDE), side(load_id, ACT)
    counted = {decide: 0, act: 0}
    pace = Pace(rate)
    async with grpc.aio.insecure_channel(address) as channel:
        open_lane = channel.stream_stream(
            METHOD,
            request_serializer=Message.SerializeToString,
            response_deserializer=Message.FromString,
        )
        start = time.perf_counter()
        measure_from = start + warmup
        stop_at = measure_from + seconds

        async def caller(own: str, run: int) -> None:
            lane = open_lane()
            while True:
                answers = run != FIRST_POLL  # (a first poll commits nothing)
                if answers:
                    await pace.turn()
                await lane.write(Message(workflow_id=own, run_id=str(run)))
                reply = await lane.read()
                if not isinstance(reply, Message):
                    raise RuntimeError(f"the floor server ended a lane: {reply!r}")
                done = time.perf_counter()
                if answers and measure_from <= done < stop_at:
                    counted[own] += 1
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


async def figures(
    address: str,
    load_id: str,
    inflight: int,
    seconds: float,
    warmup: float,
    server_cpu: Callable[[], float],
    weft: dict[str, float],
    echo_cpu_per_call_ms: float,
) -> dict[str, float]:
    """The floor beside a Weft batch (`weft`: its figures) in one repeat: an
    unpaced load, then one paced to the RPCs/s Weft's server answered, each
    counted at Weft's RPCs per activity. Both, because a grpc.aio server's CPU
    per call depends on how fast calls come, and the unpaced floor runs faster
    than Weft. Weft's distance above the floor is taken here, per repeat."""
    free = await load(address, f"{load_id}-free", inflight, seconds, warmup, server_cpu)
    paced = await load(
        address,
        f"{load_id}-paced",
        inflight,
        seconds,
        warmup,
        server_cpu,
        rate=weft["activities_per_s"] * weft["rpcs_per_activity"],
    )
    return compare(paced, free, weft, echo_cpu_per_call_ms)


def compare(
    paced: FloorResult, free: FloorResult, weft: dict[str, float], echo_cpu_per_call_ms: float
) -> dict[str, float]:
    """The figures `figures` reports, from its two loads and the Weft batch's."""
    rpcs = weft["rpcs_per_activity"]
    weft_ms = weft["server_cpu_per_activity_ms"]
    floor_ms = paced.server_cpu_per_call_ms * rpcs
    return {
        "floor.calls_per_s": paced.rate,
        "floor.server_cpu_per_call_ms": paced.server_cpu_per_call_ms,
        "floor.server_cpu_per_activity_ms": floor_ms,
        "floor.unpaced_calls_per_s": free.rate,
        "floor.unpaced_server_cpu_per_activity_ms": free.server_cpu_per_call_ms * rpcs,
        "weft.server_cpu_above_floor_ms": weft_ms - floor_ms,
        "ratio.floor_cpu_per_activity_in_echo_calls": ratio(floor_ms, echo_cpu_per_call_ms),
        "ratio.server_cpu_above_floor_in_echo_calls": ratio(
            weft_ms - floor_ms, echo_cpu_per_call_ms
        ),
        "ratio.server_cpu_per_activity_over_floor": ratio(weft_ms, floor_ms),
    }


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), sys.argv[2]))

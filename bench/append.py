"""The bare PostgreSQL reference: the "history append" transaction a workflow
engine needs per state transition, with no engine around it — update one
execution row, insert two events and one task, commit (synchronous commit,
as Weft runs). psycopg 3 async connections, one per concurrent writer, each on
rows of its own so they do not wait on each other's locks."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import psycopg

from bench.stats import percentile

ROWS_PER_WRITER = 1000

SCHEMA = """
DROP TABLE IF EXISTS append_executions, append_events, append_tasks;
CREATE TABLE append_executions (
    id bigint PRIMARY KEY, next_event_id bigint NOT NULL, version bigint NOT NULL
);
CREATE TABLE append_events (
    id bigserial PRIMARY KEY, run_id bigint NOT NULL, event_id bigint NOT NULL,
    type text NOT NULL, payload text NOT NULL, created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON append_events (run_id, event_id);
CREATE TABLE append_tasks (
    id bigserial PRIMARY KEY, queue text NOT NULL, run_id bigint NOT NULL,
    visible_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON append_tasks (queue, visible_at);
"""

PAYLOAD = '{"i": 1, "key": "' + "k" * 40 + '"}'


@dataclass(frozen=True)
class AppendResult:
    txns: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def rate(self) -> float:
        return self.txns / self.seconds


def prepare(url: str, writers: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(
            "INSERT INTO append_executions SELECT g, 1, 1 FROM generate_series(0, %s) g",
            (writers * ROWS_PER_WRITER,),
        )
        conn.execute("VACUUM ANALYZE append_executions")


async def _append(conn: psycopg.AsyncConnection[tuple[object, ...]], run_id: int) -> None:
    async with conn.transaction():
        cur = await conn.execute(
            "UPDATE append_executions SET next_event_id = next_event_id + 2,"
            " version = version + 1 WHERE id = %s RETURNING next_event_id",
            (run_id,),
        )
        row = await cur.fetchone()
        assert row is not None
        first = int(str(row[0])) - 2
        await conn.execute(
            "INSERT INTO append_events (run_id, event_id, type, payload)"
            " VALUES (%s, %s, 'ActivitySuccess', %s), (%s, %s, 'DeciderScheduled', '')",
            (run_id, first, PAYLOAD, run_id, first + 1),
        )
        await conn.execute(
            "INSERT INTO append_tasks (queue, run_id) VALUES ('bench', %s)", (run_id,)
        )


async def load(url: str, writers: int, seconds: float, warmup: float) -> AppendResult:
    """`writers` connections appending in a loop: `warmup` not counted, then `seconds`."""
    conns = [await psycopg.AsyncConnection.connect(url) for _ in range(writers)]
    latencies: list[float] = []
    start = time.perf_counter()
    measure_from = start + warmup
    stop_at = measure_from + seconds

    async def writer(n: int, conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        i = 0
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                return
            await _append(conn, n * ROWS_PER_WRITER + i % ROWS_PER_WRITER)
            i += 1
            if t0 >= measure_from:
                latencies.append(time.perf_counter() - t0)

    try:
        await asyncio.gather(*(writer(n, conn) for n, conn in enumerate(conns)))
    finally:
        for conn in conns:
            await conn.close()
    return AppendResult(
        txns=len(latencies),
        seconds=seconds,
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
    )

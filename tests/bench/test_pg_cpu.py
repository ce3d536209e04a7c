"""`bench.pg_cpu`: PostgreSQL's CPU in a window, from /proc, for `bench.hotpath`
(on this machine's cluster, as the bench runs)."""

from __future__ import annotations

import os

import psycopg

from bench.hotpath import _pg_cpu_line
from bench.pg_cpu import PgCpu, _cpu_of_postgres


def test_work_on_the_database_shows_as_its_backends_cpu(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as busy:
        before = PgCpu.sample(postgres_url)
        assert before is not None, "the test cluster runs on this machine"
        pid = busy.execute("SELECT pg_backend_pid()").fetchone()
        assert pid is not None and pid[0] in before.seconds  # a backend of this database
        busy.execute("SELECT sum(i) FROM generate_series(1, 3000000) AS i").fetchone()
        after = PgCpu.sample(postgres_url)
    assert after is not None
    assert after.since(before) >= 0.05  # ~0.3 s of work; /proc counts in 10 ms ticks
    assert after.since(after) == 0.0


def test_processes_not_on_this_machine_are_not_counted() -> None:
    # A cluster elsewhere: its pids name no process here, or another program's.
    assert _cpu_of_postgres(os.getpid()) is None
    assert _cpu_of_postgres(2**22 + 1) is None  # above Linux's largest pid
    assert PgCpu({7: 2.5}).since(PgCpu({})) == 2.5  # a process new in the window counts whole
    assert _pg_cpu_line(None, 10) == (
        "PostgreSQL CPU: not counted (the cluster is not on this machine)"
    )
    assert _pg_cpu_line(0.02, 10).startswith("PostgreSQL CPU per activity      2.00 ms")

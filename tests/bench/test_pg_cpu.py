"""`bench.pg_cpu`: PostgreSQL's CPU in a window, from /proc, for `bench.hotpath`
and `make bench` (on this machine's cluster, as the bench runs)."""

from __future__ import annotations

import os
import time

import psycopg
import pytest

from bench.hotpath import _pg_cpu_line
from bench.pg_cpu import PgCpu, _cpu_of_postgres

_WORK = "SELECT sum(i) FROM generate_series(1, 3000000) AS i"  # ~0.3 s of a backend's CPU


def _here(postgres_url: str) -> PgCpu:
    before = PgCpu.sample(postgres_url)
    if before is None:  # (a cluster in a container: its pids are not this machine's)
        with psycopg.connect(postgres_url) as conn:
            assert _cpu_of_postgres(conn.info.backend_pid) is None, "a local cluster not seen"
        pytest.skip("the test's PostgreSQL does not run on this machine")
    return before


def test_work_on_the_database_shows_as_its_backends_cpu(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as busy:
        before = _here(postgres_url)
        assert busy.info.backend_pid in before.seconds  # a backend of this database
        busy.execute(_WORK).fetchone()
        after = PgCpu.sample(postgres_url)
    assert after is not None
    assert after.since(before) >= 0.05  # /proc counts in 10 ms ticks
    assert after.since(after) == 0.0


def test_a_backend_that_ends_in_the_window_is_counted_through_the_postmaster(
    postgres_url: str,
) -> None:
    before = _here(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as gone:
        gone.execute(_WORK).fetchone()
        pid = gone.info.backend_pid
    # (The backend ends, and the postmaster reaps it, a moment after the close.)
    deadline = time.monotonic() + 5
    while True:
        after = PgCpu.sample(postgres_url)
        assert after is not None
        if pid not in after.seconds and after.since(before) >= 0.05:
            break
        assert time.monotonic() < deadline, (pid in after.seconds, after.since(before))
        time.sleep(0.05)


def test_processes_not_on_this_machine_are_not_counted() -> None:
    # A cluster elsewhere: its pids name no process here, or another program's.
    assert _cpu_of_postgres(os.getpid()) is None
    assert _cpu_of_postgres(2**22 + 1) is None  # above Linux's largest pid
    # Alive at both ends; new in the window (whole); ended in it (reaped, less its start).
    earlier, now = PgCpu({1: 1.0, 3: 0.5}, reaped=10.0), PgCpu({1: 1.5, 2: 0.25}, reaped=10.75)
    assert now.since(earlier) == 0.5 + 0.25 + (0.75 - 0.5)
    assert _pg_cpu_line(None, 10) == (
        "PostgreSQL CPU: not counted (the cluster is not on this machine)"
    )
    assert _pg_cpu_line(0.02, 10).startswith("PostgreSQL CPU per activity      2.00 ms")

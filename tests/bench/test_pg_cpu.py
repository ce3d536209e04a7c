"""`bench.pg_cpu`: PostgreSQL's CPU in a window, from /proc, for `bench.hotpath`
and `make bench` (on this machine's cluster, as the bench runs)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any, NoReturn

import psycopg
import pytest

from bench.hotpath import _pg_cpu_line
from bench.pg_cpu import PgCpu, PgCpuProbe, _cpu_of_postgres

_WORK = "SELECT sum(i) FROM generate_series(1, 3000000) AS i"  # ~0.3 s of a backend's CPU


@pytest.fixture
def probe(postgres_url: str) -> Iterator[PgCpuProbe]:
    opened = PgCpuProbe.open(postgres_url)
    if opened is None:  # (a cluster in a container: its pids are not this machine's)
        with psycopg.connect(postgres_url) as conn:
            assert _cpu_of_postgres(conn.info.backend_pid) is None, "a local cluster not seen"
        pytest.skip("the test's PostgreSQL does not run on this machine")
    yield opened
    opened.close()


def _sample(probe: PgCpuProbe) -> PgCpu:
    sample = probe.sample()
    assert sample is not None
    return sample


def test_work_on_the_database_shows_as_its_backends_cpu(
    postgres_url: str, probe: PgCpuProbe
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as busy:
        before = _sample(probe)
        assert busy.info.backend_pid in before.seconds  # a backend of this database
        busy.execute(_WORK).fetchone()
        after = _sample(probe)
    assert after.since(before) >= 0.05  # /proc counts in 10 ms ticks
    assert after.since(after) == 0.0


def test_a_backend_that_ends_in_the_window_is_counted_through_the_postmaster(
    postgres_url: str, probe: PgCpuProbe
) -> None:
    before = _sample(probe)
    with psycopg.connect(postgres_url, autocommit=True) as gone:
        gone.execute(_WORK).fetchone()
        pid = gone.info.backend_pid
    # (The backend ends, and the postmaster reaps it, a moment after the close.)
    deadline = time.monotonic() + 5
    while True:
        after = _sample(probe)
        if pid not in after.seconds and after.since(before) >= 0.05:
            break
        assert time.monotonic() < deadline, (pid in after.seconds, after.since(before))
        time.sleep(0.05)


def test_a_sample_takes_no_new_connection(
    probe: PgCpuProbe, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At the load's peak the nodes' pools may hold every connection the cluster
    # allows: a sample that connected then was refused (too many clients).
    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        raise psycopg.OperationalError("sorry, too many clients already")

    monkeypatch.setattr(psycopg, "connect", refused)
    before = _sample(probe)
    assert _sample(probe).since(before) >= 0.0


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

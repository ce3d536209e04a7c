"""PostgreSQL's CPU in a window, when the cluster runs on this machine: what
the backends serving one database used, and the cluster's own processes (the
postmaster, the WAL writer, the checkpointer, …), read from /proc.

The bench's machine CPU holds it already, with the driver's and everything
else's; this names PostgreSQL's part, so that a write that costs the database
more shows as such. A backend that ends inside the window (a pool's overflow
connection closed) is counted through the postmaster, which reaps it: so is
one of another database's that ends then (nothing else runs during a batch).

The samples go through one connection held from before the load
(`PgCpuProbe`): at the load's peak the nodes' pools may hold every connection
the cluster allows, and a new one is then refused (the full bench's two-node
point did so, 2026-11-28, at PostgreSQL's default of 100)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.procstat import CLOCK_TICKS, cpu_seconds, stat_fields

_PROCESSES = """
SELECT pid FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND (datname = current_database() OR datname IS NULL)
"""


@dataclass(frozen=True)
class PgCpu:
    """CPU seconds by PostgreSQL process at one moment, and what the postmaster's
    ended children had used by then."""

    seconds: dict[int, float]
    reaped: float = 0.0

    def since(self, earlier: PgCpu) -> float:
        """CPU seconds used since `earlier`: by the processes seen now (one new
        since then counts whole), and by those that ended meanwhile (what the
        postmaster reaped, less what they had used by `earlier`)."""
        alive = sum(now - earlier.seconds.get(pid, 0.0) for pid, now in self.seconds.items())
        gone = sum(cpu for pid, cpu in earlier.seconds.items() if pid not in self.seconds)
        return alive + (self.reaped - earlier.reaped) - gone


class PgCpuProbe:
    """A connection to the measured database, held while a node runs, that
    reads which processes are PostgreSQL's for each sample."""

    def __init__(self, conn: psycopg.Connection[Any], postmaster: int) -> None:
        self._conn = conn
        self._postmaster = postmaster

    @classmethod
    def open(cls, db_url: str) -> PgCpuProbe | None:
        """None if the cluster is not on this machine (or not readable here)."""
        conn = psycopg.connect(db_url, autocommit=True)
        try:
            own = conn.info.backend_pid
            if _cpu_of_postgres(own) is None:
                conn.close()
                return None
            return cls(conn, int(stat_fields(own)[1]))  # (a backend's parent)
        except BaseException:
            conn.close()
            raise

    def sample(self) -> PgCpu | None:
        """None if the postmaster can no longer be read (the cluster went away)."""
        pids = [int(row[0]) for row in self._conn.execute(_PROCESSES).fetchall()]
        postmaster_cpu = _cpu_of_postgres(self._postmaster)
        if postmaster_cpu is None:
            return None
        seconds = {pid: cpu for pid in pids if (cpu := _cpu_of_postgres(pid)) is not None}
        seconds[self._postmaster] = postmaster_cpu
        return PgCpu(seconds, _reaped(self._postmaster))

    def close(self) -> None:
        self._conn.close()


def _cpu_of_postgres(pid: int) -> float | None:
    try:
        if not Path(f"/proc/{pid}/comm").read_text().startswith("postgres"):
            return None  # a pid of another machine's, taken here by something else
        return cpu_seconds(pid)
    except OSError:
        return None


def _reaped(pid: int) -> float:
    """The CPU of the children `pid` has waited for (cutime + cstime)."""
    fields = stat_fields(pid)
    return (int(fields[13]) + int(fields[14])) / CLOCK_TICKS

"""PostgreSQL's CPU in a window, when the cluster runs on this machine: what
the backends serving one database used, and the cluster's own processes (the
postmaster, the WAL writer, the checkpointer, …), read from /proc.

The bench's machine CPU holds it already, with the driver's and everything
else's; this names PostgreSQL's part, so that a write that costs the database
more shows as such. A backend that ends inside the window (a pool's overflow
connection closed) is counted through the postmaster, which reaps it: so is
one of another database's that ends then (nothing else runs during a batch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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

    @staticmethod
    def sample(db_url: str) -> PgCpu | None:
        """None if the cluster is not on this machine (or not readable here)."""
        with psycopg.connect(db_url, autocommit=True) as conn:
            pids = [int(row[0]) for row in conn.execute(_PROCESSES).fetchall()]
            own = conn.info.backend_pid
        if _cpu_of_postgres(own) is None:
            return None
        postmaster = int(stat_fields(own)[1])  # (a backend's parent)
        postmaster_cpu = _cpu_of_postgres(postmaster)
        if postmaster_cpu is None:
            return None
        seconds = {pid: cpu for pid in pids if (cpu := _cpu_of_postgres(pid)) is not None}
        seconds[postmaster] = postmaster_cpu
        return PgCpu(seconds, _reaped(postmaster))

    def since(self, earlier: PgCpu) -> float:
        """CPU seconds used since `earlier`: by the processes seen now (one new
        since then counts whole), and by those that ended meanwhile (what the
        postmaster reaped, less what they had used by `earlier`)."""
        alive = sum(now - earlier.seconds.get(pid, 0.0) for pid, now in self.seconds.items())
        gone = sum(cpu for pid, cpu in earlier.seconds.items() if pid not in self.seconds)
        return alive + (self.reaped - earlier.reaped) - gone


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

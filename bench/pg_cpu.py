"""PostgreSQL's CPU in a window, when the cluster runs on this machine: what
the backends serving one database used, and the cluster's own background
processes (the WAL writer, the checkpointer, …), read from /proc.

The bench's machine CPU holds it already, with the driver's and everything
else's; this names PostgreSQL's part, so that a write that costs the database
more shows as such. Backends that begin and end inside the window (a
connection opened and closed in it) are not seen: Weft's connections are held
for the whole batch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.procstat import cpu_seconds

_PROCESSES = """
SELECT pid FROM pg_stat_activity
WHERE pid <> pg_backend_pid()
  AND (datname = current_database() OR backend_type <> 'client backend')
"""


@dataclass(frozen=True)
class PgCpu:
    """CPU seconds by PostgreSQL process at one moment."""

    seconds: dict[int, float]

    @staticmethod
    def sample(db_url: str) -> PgCpu | None:
        """The database's backends and the cluster's own processes; None if
        they are not on this machine (or not readable)."""
        with psycopg.connect(db_url, autocommit=True) as conn:
            pids = [int(row[0]) for row in conn.execute(_PROCESSES).fetchall()]
        seconds = {pid: cpu for pid in pids if (cpu := _cpu_of_postgres(pid)) is not None}
        return PgCpu(seconds) if seconds else None

    def since(self, earlier: PgCpu) -> float:
        """CPU seconds used since `earlier` by the processes seen now (one new
        since then counts whole)."""
        return sum(now - earlier.seconds.get(pid, 0.0) for pid, now in self.seconds.items())


def _cpu_of_postgres(pid: int) -> float | None:
    try:
        if not Path(f"/proc/{pid}/comm").read_text().startswith("postgres"):
            return None  # a pid of another machine's, taken here by something else
        return cpu_seconds(pid)
    except OSError:
        return None

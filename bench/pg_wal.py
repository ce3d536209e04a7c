"""What PostgreSQL wrote to its write-ahead log in a window, when the cluster runs
on this machine: its WAL records read back with `pg_waldump`, counted by table
and kind (a row inserted, updated, updated in place (HOT), deleted or locked; an
index entry; a commit), with their bytes, full-page images included.

Every durable write of the database is a WAL record, and the WAL is what a
commit waits to flush: so this says what a transition costs the database, row
by row, exactly (not sampled, and without the second or more that the
statistics views lag by), and a change that writes one row more per activity
shows as such. `bench.hotpath` reads the records between the log's positions
before and after its timed batch; the rest of the cluster should be idle then
(its own background writes, a checkpoint's full-page images, are counted too).
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

# rmgr: Heap  len (rec/tot): 61/ 61, tx: 25099, lsn: 0/7BB3E6F8, prev 0/7BB3E1C0,
# desc: INSERT+INIT off 1 flags 0x00, blkref #0: rel 1663/16386/18603 blk 0
_RECORD = re.compile(
    r"^rmgr: (?P<rmgr>\S+)\s+len \(rec/tot\):\s*(?P<rec>\d+)/\s*(?P<bytes>\d+),"
    r".*?desc: (?P<op>[A-Z0-9_+]+)(?P<rest>.*)$"
)
_FIRST_BLOCK = re.compile(r"blkref #0: rel \d+/(?P<db>\d+)/(?P<node>\d+)")
_NO_TABLE = "-"


@dataclass
class WalTally:
    """WAL records and bytes by (table, rmgr, operation); a record of no table
    (a commit) under `-`, one of a relation not named under `db<oid>:<node>`."""

    records: collections.Counter[tuple[str, str, str]] = field(default_factory=collections.Counter)
    table_bytes: collections.Counter[str] = field(default_factory=collections.Counter)
    full_page_bytes: int = 0

    @property
    def total(self) -> int:
        return sum(self.records.values())

    @property
    def bytes(self) -> int:
        return sum(self.table_bytes.values())


def tally(dump: str, names: dict[tuple[int, int], str]) -> WalTally:
    """Count `pg_waldump`'s records; `names` maps a relation's (database oid, 0
    for a shared catalog; file node) to its name."""
    out = WalTally()
    for line in dump.split("\n"):
        match = _RECORD.match(line)
        if match is None:
            continue
        rmgr, op = match["rmgr"], match["op"].removesuffix("+INIT")
        size = int(match["bytes"])
        block = _FIRST_BLOCK.search(match["rest"])
        if block is None:
            table = _NO_TABLE
        else:
            where = (int(block["db"]), int(block["node"]))
            table = names.get(where, f"db{where[0]}:{where[1]}")
        out.records[(table, rmgr, op)] += 1
        out.table_bytes[table] += size
        if "FPW" in match["rest"] or op.startswith("FPI"):  # (a block's image in the record)
            out.full_page_bytes += size - int(match["rec"])
    return out


class WalProbe:
    """Reads the WAL of the cluster that holds `db_url`: its position now, and
    the records between two positions."""

    def __init__(self, db_url: str, waldump: str, wal_dir: Path) -> None:
        self._db_url = db_url
        self._waldump = waldump
        self._wal_dir = wal_dir

    @classmethod
    def open(cls, db_url: str) -> WalProbe | str:
        """The probe, or why the WAL cannot be read here (a reason to print)."""
        try:
            with psycopg.connect(db_url, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT current_setting('data_directory'),"
                    " current_setting('server_version_num')::int / 10000"
                ).fetchone()
        except psycopg.Error as exc:  # (a role that may not read the data directory's path)
            return f"cannot ask where the cluster's WAL is: {exc}".strip()
        assert row is not None
        wal_dir, major = Path(row[0]) / "pg_wal", int(row[1])
        versioned = Path(f"/usr/lib/postgresql/{major}/bin/pg_waldump")  # (the server's own)
        waldump = str(versioned) if versioned.exists() else shutil.which("pg_waldump") or ""
        if not waldump:
            return f"no pg_waldump (PostgreSQL {major}'s client programs) on this machine"
        try:
            next(wal_dir.iterdir(), None)
        except OSError as exc:
            return f"the cluster's WAL is not readable here ({wal_dir}: {exc.strerror or exc})"
        return cls(db_url, waldump, wal_dir)

    def position(self) -> str:
        with psycopg.connect(self._db_url, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])

    def read(self, start: str, end: str) -> WalTally | str:
        """The records from `start` up to `end`, or why they cannot be read (a
        segment recycled by a checkpoint meanwhile, say). Relation names are
        those of `db_url`'s database, read now: call it before the database goes."""
        if start == end:
            return WalTally()
        done = subprocess.run(
            [self._waldump, "-p", str(self._wal_dir), "-s", start, "-e", end],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=300,
        )
        if done.returncode != 0:  # (its output would be part of the window only)
            return f"pg_waldump failed: {done.stderr.strip()[:300]}"
        return tally(done.stdout, self._names())

    def _names(self) -> dict[tuple[int, int], str]:
        with psycopg.connect(self._db_url, autocommit=True) as conn:
            rows: list[Any] = conn.execute(
                "SELECT CASE WHEN relisshared THEN 0 ELSE"
                " (SELECT oid FROM pg_database WHERE datname = current_database()) END,"
                " pg_relation_filenode(oid), relname FROM pg_class"
                " WHERE pg_relation_filenode(oid) IS NOT NULL"
            ).fetchall()
        return {(int(db), int(node)): str(name) for db, node, name in rows}


def render(wal: WalTally | str | None, activities: int, top: int = 14) -> list[str]:
    """Lines for `bench.hotpath`: per activity, the WAL's bytes and records, the
    most frequent (table, kind) first."""
    if wal is None:
        return []
    if isinstance(wal, str):
        return [f"WAL: not read ({wal})"]

    def per(n: float) -> str:
        return f"{n / activities:8.2f}"

    by_table = ", ".join(
        f"{table} {n / activities:.0f}" for table, n in wal.table_bytes.most_common(5)
    )
    lines = [
        f"WAL bytes per activity       {per(wal.bytes)}"
        f" (full-page images {wal.full_page_bytes / activities:.0f}; by table: {by_table})",
        f"WAL records per activity     {per(wal.total)}  (table, rmgr, operation):",
    ]
    ranked = sorted(wal.records.items(), key=lambda kv: (-kv[1], kv[0]))
    for (table, rmgr, op), n in ranked[:top]:
        lines.append(f"  {table[:28]:<28} {rmgr:<11} {op:<14}{per(n)}")
    rest = sum(n for _, n in ranked[top:])
    if rest:
        lines.append(f"  {'(the others)':<55}{per(rest)}")
    return lines

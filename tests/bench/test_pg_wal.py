"""`bench.pg_wal`: the WAL records a window wrote, by table and kind, read back
with pg_waldump (on this machine's cluster, as `bench.hotpath` reads it)."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from bench.pg_wal import WalProbe, WalTally, render, tally


def _record(rmgr: str, rec: int, tot: int, desc: str) -> str:
    """A line as pg_waldump prints it."""
    return (
        f"rmgr: {rmgr:<11} len (rec/tot): {rec:6}/{tot:6}, tx:      25099,"
        f" lsn: 0/7BB3E6F8, prev 0/7BB3E1C0, desc: {desc}"
    )


_DUMP = "\n".join(
    [
        _record(
            "Heap", 61, 61, "INSERT+INIT off 1 flags 0x00, blkref #0: rel 1663/16386/18603 blk 0"
        ),
        _record("Btree", 64, 64, "INSERT_LEAF off 1, blkref #0: rel 1663/16386/18608 blk 1"),
        _record(
            "Heap",
            69,
            8257,
            "HOT_UPDATE off 1 xmax 25099 flags 0x20 ; new off 3 xmax 0,"
            " blkref #0: rel 1663/16386/18603 blk 0 FPW",
        ),
        _record(
            "Heap",
            54,
            54,
            "DELETE off 2 flags 0x00 KEYS_UPDATED , blkref #0: rel 1663/16386/99999 blk 0",
        ),
        _record("Transaction", 34, 34, "COMMIT 2026-11-28 23:55:44.605585 UTC"),
        "pg_waldump: error: error in WAL record at 0/7BB3E900: invalid record length",
    ]
)


def test_records_are_counted_by_table_and_kind() -> None:
    wal = tally(_DUMP, {(16386, 18603): "orders", (16386, 18608): "orders_pkey"})
    assert wal.records == {
        ("orders", "Heap", "INSERT"): 1,  # (+INIT: the record began a page)
        ("orders_pkey", "Btree", "INSERT_LEAF"): 1,
        ("orders", "Heap", "HOT_UPDATE"): 1,
        ("db16386:99999", "Heap", "DELETE"): 1,  # a relation not named: where it is
        ("-", "Transaction", "COMMIT"): 1,  # no table
    }
    assert wal.total == 5
    assert wal.bytes == 61 + 64 + 8257 + 54 + 34
    assert wal.full_page_bytes == 8257 - 69
    assert wal.table_bytes["orders"] == 61 + 8257
    lines = render(wal, activities=1)
    assert lines[0].split()[4] == "8470.00"
    assert any(line.split()[:3] == ["orders", "Heap", "HOT_UPDATE"] for line in lines)
    assert render("no pg_waldump here", 10) == ["WAL: not read (no pg_waldump here)"]
    assert render(None, 10) == []


@pytest.fixture
def probe(postgres_url: str) -> WalProbe:
    opened = WalProbe.open(postgres_url)
    if isinstance(opened, str):  # (a cluster in a container, or without its tools here)
        pytest.skip(f"the test's PostgreSQL WAL cannot be read here: {opened}")
    return opened


def test_a_window_reads_back_the_rows_it_wrote(postgres_url: str, probe: WalProbe) -> None:
    table = f"wal_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, note text)")
        start = probe.position()
        with conn.transaction():
            conn.execute(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
            conn.execute(f"DELETE FROM {table} WHERE id = 2")
        end = probe.position()
        later = f"INSERT INTO {table} VALUES (4, 'd')"
        conn.execute(later)  # after the window: not counted
        wal = probe.read(start, end)
    assert isinstance(wal, WalTally), wal
    assert wal.records[(table, "Heap", "INSERT")] == 3
    assert wal.records[(table, "Heap", "DELETE")] == 1
    assert wal.records[(f"{table}_pkey", "Btree", "INSERT_LEAF")] == 3
    assert wal.records[("-", "Transaction", "COMMIT")] >= 1
    assert probe.read(end, end) == WalTally()


def test_a_window_whose_wal_is_gone_says_why(probe: WalProbe) -> None:
    gone = probe.read("0/10", "0/20")  # (recycled long ago)
    assert isinstance(gone, str) and gone.startswith("pg_waldump failed:"), gone

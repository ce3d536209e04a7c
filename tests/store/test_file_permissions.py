"""A SQLite database the server creates is readable by its owner only (issue 15):
it holds the task-token key and every payload."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from orchestrator.config import ServerConfig
from orchestrator.server import Server


async def test_a_new_sqlite_database_and_its_wal_are_private(tmp_path: Path) -> None:
    db = tmp_path / "weft.db"
    node = Server(ServerConfig(db_url=f"sqlite:///{db}", listen="127.0.0.1:0"))
    await node.start()
    try:
        files = [db, tmp_path / "weft.db-wal", tmp_path / "weft.db-shm"]
        for path in files:
            assert path.exists(), path
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode & 0o077 == 0, f"{path.name} is {oct(mode)}"
    finally:
        await node.stop(grace=0.5)


async def _serve_once(db: Path) -> None:
    node = Server(ServerConfig(db_url=f"sqlite:///{db}", listen="127.0.0.1:0"))
    await node.start()
    await node.stop(grace=0.5)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_an_empty_file_made_beforehand_is_made_private(tmp_path: Path) -> None:
    """`touch weft.db` gives the umask's mode (0644): the database Weft makes in
    it is as private as one it makes itself."""
    db = tmp_path / "weft.db"
    db.touch()
    db.chmod(0o644)
    await _serve_once(db)
    assert db.stat().st_size > 0
    assert _mode(db) & 0o077 == 0, oct(_mode(db))


async def test_a_database_with_a_mode_chosen_by_its_owner_keeps_it(tmp_path: Path) -> None:
    db = tmp_path / "weft.db"
    await _serve_once(db)
    db.chmod(0o640)  # shared with a group, on purpose
    await _serve_once(db)
    assert _mode(db) == 0o640


async def test_an_empty_file_shared_with_a_group_only_keeps_its_mode(tmp_path: Path) -> None:
    """Made for a service account's group on purpose (`install -m 0660`): kept."""
    db = tmp_path / "weft.db"
    db.touch()
    db.chmod(0o660)
    await _serve_once(db)
    assert _mode(db) == 0o660


# Makes a database with no table in it, and holds it open until its stdin ends
# (a sqlite3 shell left open on it).
_MAKE_AND_HOLD = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute(sys.argv[2])
db.commit()
db.execute("SELECT * FROM sqlite_master").fetchall()
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize(
    ("made_by", "beside"),
    [
        ("PRAGMA user_version=1", []),
        ("PRAGMA journal_mode=WAL", ["weft.db-wal", "weft.db-shm"]),
    ],
    ids=["header", "wal-header-and-its-files"],
)
async def test_a_database_with_nothing_in_it_yet_is_made_private(
    tmp_path: Path, made_by: str, beside: list[str]
) -> None:
    """`sqlite3 weft.db 'PRAGMA journal_mode=WAL'` writes a header and no
    table: Weft makes the database in it, so it is as private as one Weft
    makes itself, and so are the -wal and -shm files beside it, which SQLite
    uses as they are while another program still has the database open."""
    db = tmp_path / "weft.db"
    with subprocess.Popen(
        [sys.executable, "-c", _MAKE_AND_HOLD, str(db), made_by],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert holder.stdout.readline() == "ready\n"
            for path in [db, *(tmp_path / name for name in beside)]:
                path.chmod(0o644)
            assert db.stat().st_size > 0
            node = Server(ServerConfig(db_url=f"sqlite:///{db}", listen="127.0.0.1:0"))
            await node.start()
            try:
                for path in [db, tmp_path / "weft.db-wal", tmp_path / "weft.db-shm"]:
                    assert path.exists(), path
                    assert _mode(path) & 0o077 == 0, f"{path.name} is {oct(_mode(path))}"
            finally:
                await node.stop(grace=0.5)
        finally:
            holder.stdin.close()
            assert holder.wait(timeout=30) == 0


async def test_a_weft_database_open_to_others_keeps_its_mode_and_is_warned_of(
    tmp_path: Path,
) -> None:
    db = tmp_path / "weft.db"
    await _serve_once(db)
    db.chmod(0o644)  # (as a Weft before issue 15 made it, under umask 022)
    with capture_logs() as logs:
        await _serve_once(db)
    assert _mode(db) == 0o644
    warned = [e for e in logs if e["event"] == "store.database_open_to_others"]
    assert len(warned) == 1 and warned[0]["log_level"] == "warning", logs
    assert warned[0]["path"] == str(db) and warned[0]["mode"] == "0o644"
    assert f"chmod 600 {db}" in warned[0]["hint"]


async def test_a_private_weft_database_is_not_warned_of(tmp_path: Path) -> None:
    db = tmp_path / "weft.db"
    await _serve_once(db)
    db.chmod(0o640)  # (a group's access given on purpose)
    with capture_logs() as logs:
        await _serve_once(db)
    assert not [e for e in logs if e["event"] == "store.database_open_to_others"], logs

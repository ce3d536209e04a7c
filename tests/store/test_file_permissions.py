"""A SQLite database the server creates is readable by its owner only (issue 15):
it holds the task-token key and every payload."""

from __future__ import annotations

import stat
from pathlib import Path

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

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

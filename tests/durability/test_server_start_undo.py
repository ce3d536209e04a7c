"""A start that fails, and whose undo fails too: the caller gets the start's
error, the undo's is logged (`server.start_undo_failed`), and the node still
lets go of its database (the store closed, the SQLite node lock released)."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.config import ServerConfig
from orchestrator.server import Server
from orchestrator.store import nodes as node_rows
from orchestrator.store.store import Store


async def test_the_start_error_goes_up_and_the_database_is_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_url = f"sqlite:///{tmp_path / 'node.db'}"
    say = Server._say

    async def lost_at_gone(self: Server, status: str) -> None:
        # The undo's last write fails, as a database lost at that moment would.
        if status == node_rows.GONE:
            raise ConnectionError("the database went away during the undo")
        await say(self, status)

    monkeypatch.setattr(Server, "_say", lost_at_gone)
    undone = await _failed_start(db_url)
    assert isinstance(undone["exc_info"], ConnectionError), undone
    monkeypatch.undo()
    await _starts_again(db_url)


async def test_a_close_that_fails_in_the_undo_leaves_the_start_error_to_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The undo's last step, closing the store, fails: the caller still gets the
    start's error (not the close's), the close's is logged, and the node lock
    is let go."""
    db_url = f"sqlite:///{tmp_path / 'node.db'}"
    close = Store.close

    async def fails_once_closed(self: Store) -> None:
        await close(self)  # (the connections are closed: only the report fails)
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(Store, "close", fails_once_closed)
    undone = await _failed_start(db_url)
    assert isinstance(undone["exc_info"], sqlite3.OperationalError), undone
    monkeypatch.undo()
    await _starts_again(db_url)


async def _failed_start(db_url: str) -> dict[str, Any]:
    """Start a node whose metrics port is taken: the caller gets the start's
    error; returns the one `server.start_undo_failed` line it logged."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        metrics = f"127.0.0.1:{taken.getsockname()[1]}"
        node = Server(ServerConfig(db_url=db_url, listen="127.0.0.1:0", metrics_listen=metrics))
        with capture_logs() as logs, pytest.raises(OSError, match="cannot serve metrics"):
            await node.start()
    undone = [e for e in logs if e["event"] == "server.start_undo_failed"]
    assert len(undone) == 1 and undone[0]["log_level"] == "error", logs
    return undone[0]


async def _starts_again(db_url: str) -> None:
    """The database was let go: a node on the same file starts (the lock was
    released) and stops."""
    again = Server(ServerConfig(db_url=db_url, listen="127.0.0.1:0"))
    await again.start()
    await again.stop(grace=0.5)

"""`bench.memory` measures a real server's memory around real signals: a broken
set-up fails here instead of printing a number."""

from __future__ import annotations

from pathlib import Path

from bench import memory


async def test_the_servers_memory_is_measured_around_the_signals(tmp_path: Path) -> None:
    before, after = await memory.measure(3, 2, 10, tmp_path)
    assert 10 < before <= after < 2000
    written = sum(f.stat().st_size for f in tmp_path.glob("memory.db*"))
    assert written > 3 * 2 * 10_000  # the signals landed

"""`weft server` refuses bad flags and unusable settings with one readable line
on stderr and a non-zero exit code, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.serverproc import WEFT, ServerProcess


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WEFT), "server", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--db", "mysql://u@h/db"], 1, "unsupported database 'mysql'"),
        (["--db", "postgresql://postgres@127.0.0.1:1/x"], 1, "connection"),
        (["--long-poll", "5x"], 2, "invalid duration '5x'"),
        (["--listen", "127.0.0.1:notaport"], 1, "weft server:"),
    ],
    ids=["unknown-database", "database-down", "bad-duration", "bad-listen"],
)
def test_bad_settings_give_one_line(args: list[str], code: int, says: str, tmp_path: Path) -> None:
    done = _run(*args, cwd=tmp_path)
    assert done.returncode == code, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    if code == 1:
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


async def test_a_taken_port_fails_instead_of_sharing_it(sqlite_url: str, tmp_path: Path) -> None:
    node = ServerProcess(sqlite_url, tmp_path)
    await node.start()
    try:
        done = _run(
            "--db", f"sqlite:///{tmp_path}/other.db", "--listen", node.address, cwd=tmp_path
        )
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("weft server:"), done.stderr
        assert "bind" in lines[0].lower()
    finally:
        node.stop()


def test_help_lists_the_contract_flags() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli", "server", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    for flag in ("--db", "--listen", "--metrics-listen", "--long-poll"):
        assert flag in done.stdout

"""`weft server` refuses bad flags and unusable settings with one readable line
on stderr and a non-zero exit code, never a traceback."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bench.processes import REPO
from tests.certs import make_pki
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
        (["--long-poll", "85s"], 2, "--long-poll must be from 0.1s to 80s"),
        (["--long-poll", "0s"], 2, "--long-poll must be from 0.1s to 80s"),
        # At each end the flag passes: the unusable database is what is refused.
        (["--long-poll", "80s", "--db", "mysql://u@h/db"], 1, "unsupported database 'mysql'"),
        (["--long-poll", "100ms", "--db", "mysql://u@h/db"], 1, "unsupported database 'mysql'"),
        (["--listen", "127.0.0.1:notaport"], 1, "weft server:"),
    ],
    ids=[
        "unknown-database",
        "database-down",
        "bad-duration",
        "long-poll-near-the-sdk-deadline",
        "long-poll-zero",
        "long-poll-longest",
        "long-poll-shortest",
        "bad-listen",
    ],
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


async def test_a_second_node_on_one_sqlite_file_is_refused(tmp_path: Path) -> None:
    # Both would lead the upkeep (schedules fired twice) and neither would hear
    # of the other's tasks. The lock dies with its process, kill -9 included.
    url = f"sqlite:///{tmp_path}/one.db"
    first = ServerProcess(url, tmp_path)
    await first.start()
    try:
        done = _run("--db", url, "--listen", "127.0.0.1:0", "--log-level", "warning", cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().splitlines() == [
            f"weft server: another node serves {tmp_path}/one.db (process {first.proc.pid}):"
            " SQLite takes one node; point every node at PostgreSQL to run several"
        ]
        first.kill9()
        again = ServerProcess(url, tmp_path)
        await again.start()  # (the crashed node's lock went with it)
        again.stop()
    finally:
        first.stop()


def test_a_start_that_fails_late_leaves_the_node_gone_and_its_lease_free(tmp_path: Path) -> None:
    # The metrics listener is the last thing a start opens: by then the node has
    # its row, the upkeep lease and a gRPC listener. None of it may outlive the
    # failure (before, the row said "starting", the lease held for its period,
    # and gRPC's server said its own traceback as the process exited).
    db = tmp_path / "node.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        metrics = f"127.0.0.1:{taken.getsockname()[1]}"
        done = _run(
            "--db", f"sqlite:///{db}", "--listen", "127.0.0.1:0", "--metrics-listen", metrics,
            "--log-level", "warning", cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"weft server: cannot serve metrics on {metrics}: Address already in use"
    ]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status FROM nodes").fetchall() == [("gone",)]
        assert conn.execute("SELECT * FROM leases").fetchall() == []


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


def _worker_settings(monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, str]:
    """The environment `weft server --workers 2 ARGS` hands its processes (the
    supervisor replaced by one that only records it)."""
    from click.testing import CliRunner

    from cli import supervisor
    from cli.server_cmd import server
    from orchestrator import logging as weft_logging

    seen: dict[str, str] = {}

    def record(settings: dict[str, str], workers: int) -> int:
        seen.update(settings)
        return 0

    monkeypatch.setattr(supervisor, "supervise", record)
    monkeypatch.setattr(sys, "path", list(sys.path))  # (--embed adds the working directory)
    # (Logging set up for the whole test process, to a stream CliRunner closes: not here.)
    monkeypatch.setattr(weft_logging, "configure", lambda level: None)
    for name in [k for k in os.environ if k.startswith("WEFT_")]:
        monkeypatch.delenv(name)
    done = CliRunner().invoke(
        server, ["--workers", "2", "--db", "postgresql://postgres@127.0.0.1/x", *args]
    )
    assert done.exit_code == 0, done.output
    return seen


def test_every_setting_reaches_the_processes_of_workers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each `weft server` option read from the environment is passed on to the
    processes of `--workers N` (all but --workers itself): a new flag that is
    not fails here."""
    from cli.server_cmd import server

    pki = make_pki(tmp_path / "pki")  # (read at the start: files that can be served)
    server_pair, ca = pki.server, str(pki.ca.path)
    tls = ["--tls-cert", str(server_pair.cert), "--tls-key", str(server_pair.key)]
    tls += ["--tls-client-ca", ca]
    passed = _worker_settings(monkeypatch, *tls, "--insecure", "--auth", "--folded-poll", "3s")
    assert passed["WEFT_FOLDED_POLL"] == "3.0s"
    assert passed["WEFT_DIRECT_LANES"] == "1"
    assert _worker_settings(monkeypatch, "--no-direct-lanes")["WEFT_DIRECT_LANES"] == "0"
    steps = str(REPO / "examples" / "steps")
    embedding = ("--embed", "examples.order", "--embed-definitions", steps)
    passed |= _worker_settings(monkeypatch, *embedding, "--embed-concurrency", "4")
    assert passed["WEFT_EMBED_DEFINITIONS"] == steps
    wanted = {
        envvar
        for param in server.params
        for envvar in ([param.envvar] if isinstance(param.envvar, str) else param.envvar or [])
    }
    assert {"WEFT_LONG_POLL", "WEFT_FOLDED_POLL", "WEFT_TLS_CERT"} <= wanted
    assert wanted - {"WEFT_WORKERS"} <= set(passed)

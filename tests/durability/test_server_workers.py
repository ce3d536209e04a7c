"""`weft server --workers N`: N server processes share one port on PostgreSQL.

A workflow runs through them from several connections (the kernel spreads
connections over the processes); a worker killed with -9 is restarted by the
supervisor and the service keeps answering; SIGTERM to the supervisor drains
every worker and it exits 0. SQLite refuses the flag with one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli import supervisor
from sdk.api.weft.v1 import service_pb2_grpc as sg
from sdk.client import AsyncClient
from sdk.poll_connections import spread_connections
from sdk.tls import TlsConfig
from tests.certs import make_pki
from tests.helpers import Driver, complete, schedule, unique, wait_until
from tests.serverproc import WEFT, ServerProcess, free_port


def _children(pid: int) -> set[int]:
    """Live child processes of `pid`, read from /proc."""
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # Field 4 (ppid) follows the command name, which is in parentheses.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


def test_workers_need_postgresql(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(WEFT), "server", "--db", f"sqlite:///{tmp_path}/w.db", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "weft server: --workers needs PostgreSQL (SQLite is one node)"


def _server(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WEFT), "server", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_settings_no_process_could_serve_end_the_supervisor_at_once(tmp_path: Path) -> None:
    # Before, each process failed on the files and the supervisor restarted them
    # without end; a bad --metrics-listen was a traceback of the supervisor's.
    pki = make_pki(tmp_path / "pki")
    nowhere = "postgresql://postgres@127.0.0.1:1/nowhere"  # (never opened)
    listen = f"127.0.0.1:{free_port()}"
    cert, other_key = str(pki.server.cert), str(pki.client.key)
    for workers in ("1", "2"):
        mismatched = _server(
            "--db", nowhere, "--listen", listen, "--workers", workers,
            "--tls-cert", cert, "--tls-key", other_key,
        )  # fmt: skip
        assert mismatched.returncode == 2, mismatched.stderr  # bad input
        lines = mismatched.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("weft server: cannot use the certificate")
        metrics = _server(
            "--db", nowhere, "--listen", listen, "--workers", workers,
            "--metrics-listen", "127.0.0.1:abc",
        )  # fmt: skip
        assert metrics.returncode == 2, metrics.stderr
        lines = metrics.stderr.strip().splitlines()
        assert len(lines) == 1 and "--metrics-listen" in lines[0], lines


def test_a_metrics_port_with_no_room_for_every_worker_is_refused_before_any_starts(
    tmp_path: Path,
) -> None:
    # Worker i serves its metrics on the port plus i. Before, the second process
    # refused 127.0.0.1:65536 and the supervisor restarted it without end.
    nowhere = "postgresql://postgres@127.0.0.1:1/nowhere"  # (never opened)
    listen = f"127.0.0.1:{free_port()}"
    last = ("--db", nowhere, "--listen", listen, "--metrics-listen", "127.0.0.1:65535")
    done = _server(*last, "--workers", "2", timeout=20)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("weft server: Invalid value for '--metrics-listen'"), lines
    assert "give a port up to 65534" in lines[0]
    alone = _server(*last, "--workers", "1")  # one process: the port is fine
    assert alone.returncode == 1 and "connection" in alone.stderr, alone.stderr


def test_each_worker_serves_its_metrics_on_the_next_port() -> None:
    assert supervisor.worker_metrics_listen("", 3) == ""  # (no metrics: none for any)
    assert supervisor.worker_metrics_listen("127.0.0.1:9100", 0) == "127.0.0.1:9100"
    assert supervisor.worker_metrics_listen("[::1]:9100", 2) == "[::1]:9102"
    with pytest.raises(ValueError, match="up to 65534"):
        supervisor.worker_metrics_listen("127.0.0.1:65535", 1)


SERVES = ["sleep", "60"]  # (until its SIGTERM)
EXITS = [sys.executable, "-c", "raise SystemExit(1)"]
REFUSES = [sys.executable, "-c", "raise SystemExit(2)"]  # its settings, as `weft server` does


@dataclass
class Start:
    """One process the supervisor under test starts in place of a server."""

    argv: list[str]
    signalled: bool = False  # a SIGTERM reaches the supervisor during the start


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The processes started by `supervise` under `_plan`, none left running
    after the test, and the test process's signal handlers put back."""
    handlers = {
        sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    }
    monkeypatch.setattr(supervisor, "RESTART_PAUSE", 0.01)
    # A process the supervisor failed to stop is killed after this, not 60 s.
    monkeypatch.setattr(supervisor, "STOP_GRACE", 5.0)
    made: list[subprocess.Popen[bytes]] = []
    try:
        yield made
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for proc in made:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _plan(
    monkeypatch: pytest.MonkeyPatch,
    made: list[subprocess.Popen[bytes]],
    plan: dict[int, list[Start]],
) -> None:
    """Worker i's starts, in order, are `plan[i]`'s; one more is a failure."""

    def start(settings: dict[str, str], index: int, workers: int) -> subprocess.Popen[bytes]:
        if not plan[index]:
            raise AssertionError(f"worker {index} started once more than planned")
        step = plan[index].pop(0)
        made.append(subprocess.Popen(step.argv))
        if step.signalled:  # (from inside the start: deterministic)
            os.kill(os.getpid(), signal.SIGTERM)
        return made[-1]

    monkeypatch.setattr(supervisor, "_worker", start)


def test_a_signal_while_the_supervisor_starts_stops_what_it_started(
    monkeypatch: pytest.MonkeyPatch, made: list[subprocess.Popen[bytes]]
) -> None:
    # The signal lands as the first process is made. Before, the supervisor's
    # handlers came after every start: the signal ended it and the processes
    # went on serving.
    _plan(monkeypatch, made, {0: [Start(SERVES, signalled=True)], 1: [], 2: []})
    assert supervisor.supervise({}, 3) == 0
    assert len(made) == 1  # no process started after the signal
    assert made[0].returncode == -signal.SIGTERM  # and the one started was stopped


def test_a_signal_while_a_worker_restarts_stops_the_new_process(
    monkeypatch: pytest.MonkeyPatch, made: list[subprocess.Popen[bytes]]
) -> None:
    # Before, the process made by the restart was not yet listed when the
    # signal came: it served on until the supervisor killed it, 60 s later.
    _plan(monkeypatch, made, {0: [Start(EXITS), Start(SERVES, signalled=True)]})
    assert supervisor.supervise({}, 1) == 0
    assert len(made) == 2
    assert made[1].returncode == -signal.SIGTERM


def test_settings_refused_at_the_first_start_stop_every_worker(
    monkeypatch: pytest.MonkeyPatch, made: list[subprocess.Popen[bytes]]
) -> None:
    # Exit 2 is a process refusing its settings, which are every process's:
    # no restart would do better. Before, it was restarted without end.
    _plan(monkeypatch, made, {0: [Start(SERVES)], 1: [Start(REFUSES)]})
    assert supervisor.supervise({}, 2) == 2
    assert made[0].returncode == -signal.SIGTERM  # the other one, stopped


def test_settings_refused_at_a_restart_leave_the_others_serving(
    monkeypatch: pytest.MonkeyPatch, made: list[subprocess.Popen[bytes]]
) -> None:
    # Once the workers served, a refusal (a module or a file changed since)
    # is restarted like any other exit: the other processes go on serving.
    plan = {0: [Start(EXITS), Start(REFUSES), Start(SERVES, signalled=True)], 1: [Start(SERVES)]}
    _plan(monkeypatch, made, plan)
    assert supervisor.supervise({}, 2) == 0
    assert len(made) == 4
    assert [proc.returncode for proc in made if proc.args == SERVES] == [-signal.SIGTERM] * 2


def _log_count(path: Path, event: str) -> int:
    return path.read_text(errors="replace").count(f'"event": "{event}"')


async def test_sighup_reaches_the_workers_and_ends_none_with_tls(
    postgres_url: str, tmp_path: Path
) -> None:
    # SIGHUP is how the README says to reload the TLS files. Before, it ended
    # the supervisor (its default action) and left its workers serving.
    pki = make_pki(tmp_path / "pki")
    tls = ("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key))
    node = ServerProcess(
        postgres_url,
        tmp_path,
        name="hup-tls",
        extra_args=("--workers", "2", *tls),
        tls=TlsConfig(ca=pki.ca.path),
    )
    workers: set[int] = set()
    try:
        supervisor_pid = await _two_workers(node)
        workers = _children(supervisor_pid)
        # Both have their handlers (set before they start): a SIGHUP is not their end.
        await wait_until(lambda: _ready(_log_count(node.log_path, "server.started") == 2))
        assert _log_count(node.log_path, "tls.reloaded") == 0
        os.kill(supervisor_pid, signal.SIGHUP)
        await wait_until(lambda: _ready(_log_count(node.log_path, "tls.reloaded") == 2))
        assert node.proc is not None and node.proc.poll() is None
        assert _children(supervisor_pid) == workers
        await node.wait_serving()
        assert await node.terminate() == 0, node.log_tail()
    finally:
        node.stop()
        _kill(workers)


async def test_sighup_without_tls_stops_the_workers_too(postgres_url: str, tmp_path: Path) -> None:
    # A node without TLS ends on SIGHUP; before, the supervisor did, alone.
    node = ServerProcess(postgres_url, tmp_path, name="hup", extra_args=("--workers", "2"))
    workers: set[int] = set()
    try:
        supervisor_pid = await _two_workers(node)
        workers = _children(supervisor_pid)
        assert node.proc is not None
        os.kill(supervisor_pid, signal.SIGHUP)
        assert await asyncio.to_thread(node.proc.wait, 30) == 0, node.log_tail()
        assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    finally:
        node.stop()
        _kill(workers)


def _kill(pids: set[int]) -> None:
    """Processes a failing test may have left behind."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def _one_workflow(node: ServerProcess) -> None:
    """Start, decide, run one activity and complete, each step over its own connection."""
    acts = unique("acts")
    async with node.channel() as first:
        driver = Driver(sg.WorkflowServiceStub(first))
        await driver.start()
        task = await driver.poll_decision()
    async with node.channel() as second:
        driver.stub = sg.WorkflowServiceStub(second)
        await driver.decide(task, schedule("a1", "work", acts, start_to_close=30))
        act = await driver.poll_activity(acts)
        await driver.finish_activity(act, "done")
    async with node.channel() as third:
        driver.stub = sg.WorkflowServiceStub(third)
        task = await driver.poll_decision()
        await driver.decide(task, complete("ok"))
        types = await driver.types()
    assert types[-1] == "WorkflowSuccess", types


async def _two_workers(node: ServerProcess) -> int:
    """Start `node` (`--workers 2`) and wait for both its processes: the supervisor's pid."""
    await node.start()
    assert node.proc is not None
    supervisor = node.proc.pid
    await wait_until(lambda: _ready(len(_children(supervisor)) == 2))
    return supervisor


async def test_workers_serve_restart_and_drain(postgres_url: str, tmp_path: Path) -> None:
    node = ServerProcess(postgres_url, tmp_path, name="workers", extra_args=("--workers", "2"))
    try:
        supervisor = await _two_workers(node)
        await asyncio.gather(*(_one_workflow(node) for _ in range(4)))

        # kill -9 one worker: the supervisor starts another in its place.
        victim = min(_children(supervisor))
        os.kill(victim, signal.SIGKILL)
        await wait_until(
            lambda: _ready(victim not in _children(supervisor) and len(_children(supervisor)) == 2),
            timeout=20,
        )
        await node.wait_serving()
        await _one_workflow(node)

        workers = _children(supervisor)
        assert await node.terminate() == 0, node.log_tail()
        assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    finally:
        node.stop()


async def test_a_workers_poll_connections_are_spread_over_the_processes(
    postgres_url: str, tmp_path: Path
) -> None:
    """The kernel places each connection in one process at random; a worker's
    poll connections end up two in each of two (by chance, only three times in
    eight for four connections: three spreads in a row, about one in twenty)."""
    node = ServerProcess(postgres_url, tmp_path, name="spread", extra_args=("--workers", "2"))
    try:
        await _two_workers(node)
        await node.wait_serving()
        async with AsyncClient(node.address) as client:
            await wait_until(lambda: _both_accept(client), timeout=30)
            for _ in range(3):
                connections: list[AsyncClient] = []
                try:
                    await spread_connections(client, 4, connections)
                    places = [await c.placement() for c in connections]
                finally:
                    await asyncio.gather(*(c.close() for c in connections))
                assert all(p is not None and p.processes == 2 for p in places), places
                held = Counter(p.node for p in places if p is not None)
                assert sorted(held.values()) == [2, 2], held
    finally:
        node.stop()


async def _ready(value: bool) -> bool:
    return value


async def _both_accept(client: AsyncClient) -> bool:
    """Whether connections dialled now reach both processes. A process that is
    running may not have bound the port yet (a slow start under load): until it
    has, the kernel hands every connection to the other, and no spreading can
    help (the test failed so once in CI)."""
    dialled = [client.fork() for _ in range(8)]
    try:
        places = await asyncio.gather(*(c.placement() for c in dialled))
    finally:
        await asyncio.gather(*(c.close() for c in dialled))
    return len({p.node for p in places if p is not None}) == 2


async def test_workers_from_the_variable_start_no_workers_of_their_own(
    postgres_url: str, tmp_path: Path
) -> None:
    """WEFT_WORKERS=2 in the environment: two workers, not a tree of supervisors."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
    env |= {"WEFT_WORKERS": "2", "WEFT_DATABASE_URL": postgres_url}
    with (tmp_path / "workers-env.log").open("wb") as log:
        proc = subprocess.Popen(
            [str(WEFT), "server", "--listen", f"127.0.0.1:{port}"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        await wait_until(lambda: _ready(len(_children(proc.pid)) == 2))
        await asyncio.sleep(3)  # time enough for a worker to have started its own
        workers = _children(proc.pid)
        assert len(workers) == 2, workers
        assert all(not _children(pid) for pid in workers), "a worker started workers"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0

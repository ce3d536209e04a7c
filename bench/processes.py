"""The processes under test: `weft server`, `weft decider`, `weft runner`, and
the helper processes of the references (the gRPC echo server, the DBOS peer).

Each writes its output to a log file in the run's log directory; when one dies
early, its log tail is in the error.

The module-level helpers (`free_port`, `spawn`, `stop`, `kill9`, `log_tail`,
`wait_serving`, `wait_http`) are the one implementation of child-process
handling: the bench, the chaos run and the tests' `ServerProcess`,
`WorkerProcess` and `UiProcess` all use them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.procstat import cpu_seconds, tree_cpu_seconds

PYTHON = sys.executable
WEFT = str(Path(PYTHON).parent / "weft")
REPO = Path(__file__).resolve().parent.parent


# Ports for servers to listen on are taken below the kernel's ephemeral range
# (`ip_local_port_range`, 32768 and up by default): a port from that range can
# be handed to an outgoing connection (to PostgreSQL, say) between the moment
# it was found free here and the moment the server binds it.
_LISTEN_PORTS = range(20_000, 32_000)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, for a server to bind."""
    for _ in range(50):
        port = random.choice(_LISTEN_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # (all those tried were taken: let the kernel choose)
        sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def spawn(
    argv: list[str],
    log_path: Path,
    *,
    cwd: Path | None = REPO,
    stdin: int = subprocess.DEVNULL,
    stdout: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` in its own session (a Ctrl-C of ours reaches us, not it), its
    output (stdout too unless `stdout` is given) in `log_path`."""
    # Our own WEFT_* settings must not leak into the processes under test.
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
    child_env.update(env or {})
    with log_path.open("wb") as log:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=stdin,
            stdout=log if stdout is None else stdout,
            stderr=log,
            env=child_env,
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[Any] | None, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout`."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


def kill9(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL: no drain, no cleanup, exactly like a crash."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def log_tail(log_path: Path, lines: int) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except FileNotFoundError:
        return f"({log_path} missing)"
    tail = "\n".join(text.splitlines()[-lines:])
    return f"--- {log_path} (last {lines} lines) ---\n{tail}"


async def wait_serving(
    channel: grpc.aio.Channel, check_alive: Callable[[], None], timeout: float
) -> bool:
    """Poll the gRPC health check over `channel` (closed on return) until it says
    SERVING (True) or `timeout` passes (False); `check_alive` raises when the
    process died meanwhile."""
    deadline = time.monotonic() + timeout
    async with channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            check_alive()
            try:
                resp = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return True
            except grpc.aio.AioRpcError:
                pass
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)


def wait_http(
    url: str,
    check_alive: Callable[[], None],
    timeout: float,
    context: ssl.SSLContext | None = None,
) -> bool:
    """Poll a GET of `url` until it answers with a success (True) or `timeout`
    passes (False); `check_alive` raises when the process died meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        check_alive()
        try:
            with urllib.request.urlopen(url, timeout=1, context=context):
                return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)


def wait_for_port(port: int, timeout: float = 15.0) -> None:
    """Return once something accepts connections on 127.0.0.1:PORT (a server
    process just started); `OSError` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def free_ports(n: int) -> int:
    """The first of `n` consecutive free ports."""
    for _ in range(100):
        first = free_port()
        try:
            for port in range(first + 1, first + n):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError(f"no {n} consecutive free ports")


class Process:
    """One child process with its log; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, argv: list[str], log_dir: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def run_under(self, launcher: list[str]) -> None:
        """Start the command through `launcher` (which then runs `weft …`
        itself): `bench.loop_census`. Before `start`."""
        assert self.proc is None and self.argv[0] == WEFT
        self.argv = [*launcher, "weft", *self.argv[1:]]

    def start(self, *, stdin: int = subprocess.DEVNULL, stdout: int | None = None) -> Process:
        # cwd: `bench.workload` imports from the checkout
        self.proc = spawn(self.argv, self.log_path, cwd=REPO, stdin=stdin, stdout=stdout)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def check_alive(self) -> None:
        if not self.running:
            code = self.proc.returncode if self.proc else None
            raise RuntimeError(f"{self.name} exited (code {code})\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        stop(self.proc, timeout)

    def log_tail(self, lines: int = 25) -> str:
        return log_tail(self.log_path, lines)


class WeftServer(Process):
    """`weft server --db URL` on a free port, its metrics on another."""

    def __init__(
        self,
        name: str,
        db_url: str,
        log_dir: Path,
        log_level: str,
        extra: tuple[str, ...] = (),
        tls_ca: str = "",
    ) -> None:
        self.tls_ca = tls_ca
        """With --tls-cert in `extra`: the CA to verify it (and its metrics) with."""
        self.port = free_port()
        self.workers = int(extra[extra.index("--workers") + 1]) if "--workers" in extra else 1
        # The workers of `--workers N` serve metrics on this port and the next N - 1.
        self.metrics_port = free_ports(self.workers)
        super().__init__(
            name,
            [
                WEFT,
                "server",
                "--db",
                db_url,
                "--listen",
                self.address,
                "--metrics-listen",
                f"127.0.0.1:{self.metrics_port}",
                "--log-level",
                log_level,
                *extra,
            ],
            log_dir,
        )

    def cpu(self) -> float:
        return tree_cpu_seconds(self.pid)

    def counts(self) -> Counts:
        """The server's own counters so far (summed over its workers): RPCs by
        method, SQL statements, transactions."""
        total = Counts()
        scheme = "https" if self.tls_ca else "http"
        context = ssl.create_default_context(cafile=self.tls_ca) if self.tls_ca else None
        for port in range(self.metrics_port, self.metrics_port + self.workers):
            url = f"{scheme}://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=10, context=context) as resp:
                total = total + Counts.parse(resp.read().decode())
        return total

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def wait_serving(self, timeout: float = 60.0) -> None:
        if self.tls_ca:
            ca = Path(self.tls_ca).read_bytes()
            channel = grpc.aio.secure_channel(self.address, grpc.ssl_channel_credentials(ca))
        else:
            channel = grpc.aio.insecure_channel(self.address)
        if not await wait_serving(channel, self.check_alive, timeout):
            raise RuntimeError(f"{self.name} not serving in {timeout}s\n{self.log_tail()}")
        # With --workers N, the port serves once one worker listens: the others
        # (and their metrics) may still be starting.
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.counts()
                return
            except OSError as exc:
                self.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self.name}: not every worker serves metrics in {timeout}s: {exc}"
                        f"\n{self.log_tail()}"
                    ) from exc
                await asyncio.sleep(0.1)


@dataclass
class Counts:
    rpcs: dict[str, float] = field(default_factory=dict)
    statements: float = 0.0
    transactions: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Counts:
        out = cls()
        for line in text.splitlines():
            if line.startswith("weft_rpc_duration_seconds_count{"):
                labels, _, value = line.rpartition(" ")
                method = labels.split('method="', 1)[1].split('"', 1)[0]
                out.rpcs[method] = out.rpcs.get(method, 0.0) + float(value)
            elif line.startswith("weft_db_statements_total "):
                out.statements = float(line.split()[1])
            elif line.startswith("weft_db_transactions_total "):
                out.transactions = float(line.split()[1])
        return out

    def __add__(self, other: Counts) -> Counts:
        rpcs = dict(self.rpcs)
        for method, n in other.rpcs.items():
            rpcs[method] = rpcs.get(method, 0.0) + n
        return Counts(
            rpcs, self.statements + other.statements, self.transactions + other.transactions
        )

    def __sub__(self, earlier: Counts) -> Counts:
        rpcs = {m: n - earlier.rpcs.get(m, 0.0) for m, n in self.rpcs.items()}
        return Counts(
            {m: n for m, n in rpcs.items() if n},
            self.statements - earlier.statements,
            self.transactions - earlier.transactions,
        )


def weft_worker(
    kind: str, name: str, address: str, args: list[str], log_dir: Path, log_level: str
) -> Process:
    """`weft runner|decider --address A ARGS…`."""
    argv = [WEFT, kind, "--address", address, "--identity", name, "--log-level", log_level, *args]
    return Process(name, argv, log_dir)


def python_module(name: str, module: str, args: list[str], log_dir: Path) -> Process:
    """`python -m MODULE ARGS…` with the bench's own interpreter."""
    return Process(name, [PYTHON, "-m", module, *args], log_dir)


@contextlib.contextmanager
def module_serving(
    name: str, module: str, args: list[str], port: int, log_dir: Path
) -> Iterator[Process]:
    """`python_module` listening on 127.0.0.1:PORT for the block, stopped after
    it (if it died before it listened, `check_alive` says why)."""
    server = python_module(name, module, args, log_dir)
    server.start()
    try:
        try:
            wait_for_port(port)
        except OSError:
            server.check_alive()
            raise
        yield server
    finally:
        server.stop()

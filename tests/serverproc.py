"""`weft server` as a real subprocess: start it on a free port, wait until its gRPC
health check says SERVING, then kill -9 it, stop it with SIGTERM, or restart it
on the same database and port. Its stdout and stderr go to a log file, whose
tail is shown when the process dies unexpectedly."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sdk.tls import TlsConfig

WEFT = Path(sys.executable).parent / "weft"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    """One orchestrator node running as `weft server --db URL` in its own process."""

    def __init__(
        self,
        db_url: str,
        log_dir: Path,
        name: str = "node",
        long_poll: str = "2s",
        extra_args: tuple[str, ...] = (),
        tls: TlsConfig | None = None,
    ) -> None:
        self.db_url = db_url
        self.tls = tls
        """How this harness connects (its health checks), when `extra_args` turn TLS on."""
        self.extra_args = extra_args
        self.log_dir = log_dir
        self.name = name
        self.long_poll = long_poll
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log_path = log_dir / f"{name}-0.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def channel(self) -> grpc.aio.Channel:
        if self.tls is not None:
            return grpc.aio.secure_channel(
                self.address, self.tls.credentials(), options=self.tls.channel_options()
            )
        return grpc.aio.insecure_channel(self.address)

    # -- life cycle -----------------------------------------------------------------

    async def start(self, timeout: float = 30.0) -> None:
        """Spawn the process and return once it serves (health check SERVING)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        self.log_path = self.log_dir / f"{self.name}-{self.starts}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    str(WEFT),
                    "server",
                    "--db",
                    self.db_url,
                    "--listen",
                    self.address,
                    "--long-poll",
                    self.long_poll,
                    "--log-level",
                    "info",
                    *self.extra_args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # our own signals (Ctrl-C) do not reach it
            )
        await self.wait_serving(timeout)

    async def wait_serving(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        async with self.channel() as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while True:
                self._check_alive()
                try:
                    resp = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                    if resp.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.aio.AioRpcError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{self.name} not SERVING within {timeout}s\n{self.log_tail()}"
                    )
                await asyncio.sleep(0.05)

    def kill9(self) -> None:
        """SIGKILL: no drain, no cleanup, exactly like a crash."""
        proc = self._running()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    async def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM: the node drains and exits; returns its exit code."""
        proc = self._running()
        proc.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(proc.wait, timeout)

    async def restart(self, timeout: float = 30.0) -> None:
        """kill -9 (if still running), then start again on the same database and port."""
        if self.proc is not None and self.proc.poll() is None:
            self.kill9()
        await self.start(timeout)

    def stop(self) -> None:
        """Best-effort clean-up for fixtures: SIGTERM, then SIGKILL if it hangs."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)

    # -- diagnostics ------------------------------------------------------------------

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return f"({self.log_path} missing)"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- {self.log_path} (last {lines} lines) ---\n{tail}"

    def _running(self) -> subprocess.Popen[bytes]:
        assert self.proc is not None and self.proc.poll() is None, f"{self.name} is not running"
        return self.proc

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(
                f"{self.name} exited with code {self.proc.returncode}\n{self.log_tail()}"
            )

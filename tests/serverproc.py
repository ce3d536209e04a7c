"""`weft server` as a real subprocess: start it on a free port, wait until its gRPC
health check says SERVING, then kill -9 it, stop it with SIGTERM, or restart it
on the same database and port. Its stdout and stderr go to a log file, whose
tail is shown when the process dies unexpectedly.

The process handling itself (spawn, health wait, stop, kill) is the bench's
(`bench.processes`), shared with the chaos run: the bench is a tool beside the
project that must not import the tests, so the tests import it."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import grpc

from bench import processes
from bench.processes import free_port
from sdk.tls import TlsConfig

WEFT = Path(processes.WEFT)

__all__ = ["WEFT", "ServerProcess", "free_port"]


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
        self.proc = processes.spawn(
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
            self.log_path,
            cwd=None,
        )
        await self.wait_serving(timeout)

    async def wait_serving(self, timeout: float = 30.0) -> None:
        if not await processes.wait_serving(self.channel(), self._check_alive, timeout):
            raise AssertionError(f"{self.name} not SERVING within {timeout}s\n{self.log_tail()}")

    def kill9(self) -> None:
        """SIGKILL: no drain, no cleanup, exactly like a crash."""
        processes.kill9(self._running())

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
        processes.stop(self.proc, timeout=15)

    # -- diagnostics ------------------------------------------------------------------

    def log_tail(self, lines: int = 40) -> str:
        return processes.log_tail(self.log_path, lines)

    def _running(self) -> subprocess.Popen[bytes]:
        assert self.proc is not None and self.proc.poll() is None, f"{self.name} is not running"
        return self.proc

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(
                f"{self.name} exited with code {self.proc.returncode}\n{self.log_tail()}"
            )

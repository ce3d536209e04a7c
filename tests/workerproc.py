"""`weft runner` / `weft decider` as real subprocesses, next to `ServerProcess`."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

from bench import processes
from tests.serverproc import WEFT, ServerProcess

REPO = processes.REPO


class WorkerProcess:
    """One `weft runner|decider ARGS…` process, its output in a log file."""

    def __init__(
        self,
        kind: str,
        args: list[str],
        address: str,
        log_dir: Path,
        name: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.extra_env = env or {}
        self.args = args
        self.address = address
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        self.proc = processes.spawn(
            [
                str(WEFT),
                self.kind,
                "--address",
                self.address,
                "--identity",
                self.name,
                *self.args,
            ],
            self.log_path,
            cwd=REPO,  # so `examples.order` imports as it does for a user in the repo
            env=self.extra_env,
        )
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        processes.kill9(self.proc)

    def sigterm(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    async def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return await asyncio.to_thread(self.proc.wait, timeout)

    def stop(self) -> None:
        """Fixture clean-up: SIGTERM, then SIGKILL if it hangs."""
        processes.stop(self.proc, timeout=15)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        tail = "\n".join(self.log().splitlines()[-lines:])
        return f"--- {self.log_path} ---\n{tail}"


def spawn(
    workers: list[WorkerProcess],
    node: ServerProcess,
    log_dir: Path,
    kind: str,
    name: str,
    *args: str,
    env: dict[str, str] | None = None,
) -> WorkerProcess:
    """Start `weft KIND ARGS…` against `node`; `workers` stops it at the end."""
    worker = WorkerProcess(kind, list(args), node.address, log_dir, name, env).start()
    workers.append(worker)
    return worker

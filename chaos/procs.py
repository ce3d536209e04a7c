"""The processes a chaos run kills: `weft server` nodes, `weft decider` and
`weft runner` processes (the benchmark's process helpers, with one log file per
life so the log of a killed process survives its restart), and PostgreSQL when
the run owns its cluster (`pgcluster`)."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bench.processes import Process, WeftServer, weft_worker

Kind = Literal["server", "decider", "runner"]
WORKFLOW_MODULE = "chaos.workflow"


class Lives:
    """Gives each start of a process its own log file: `NAME-1.log`, `NAME-2.log`…"""

    def __init__(self, proc: Process, log_dir: Path) -> None:
        self.proc = proc
        self.log_dir = log_dir
        self.count = 0

    def next_log(self) -> None:
        self.count += 1
        self.proc.log_path = self.log_dir / f"{self.proc.name}-{self.count}.log"


@dataclass
class Member:
    """One process of the cluster under test, as the chaos loop sees it."""

    kind: Kind
    proc: Process
    lives: Lives
    # Set while the chaos loop has it down on purpose: the watchdog leaves it be.
    down: bool = False
    unexpected_exits: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.proc.name

    @property
    def address(self) -> str:
        """Where a server listens (the same port in each of its lives)."""
        assert isinstance(self.proc, WeftServer), f"{self.name} is not a server"
        return self.proc.address

    async def start(self) -> None:
        self.lives.next_log()
        self.proc.start()
        if isinstance(self.proc, WeftServer):
            await self.proc.wait_serving()
        self.down = False

    def kill9(self) -> None:
        """SIGKILL, no drain: exactly a crash."""
        self.down = True
        popen = self.proc.proc
        if popen is not None and popen.poll() is None:
            popen.send_signal(signal.SIGKILL)
            popen.wait(timeout=10)

    def exited_by_itself(self) -> bool:
        return not self.down and not self.proc.running

    async def stop(self) -> None:
        await asyncio.to_thread(self.proc.stop)


def server(name: str, db_url: str, log_dir: Path) -> Member:
    proc = WeftServer(name, db_url, log_dir, "info")
    return Member("server", proc, Lives(proc, log_dir))


def worker(kind: Literal["decider", "runner"], name: str, address: str, log_dir: Path) -> Member:
    args = ["--task-list", "chaos", "--concurrency", "16", WORKFLOW_MODULE]
    proc = weft_worker(kind, name, address, args, log_dir, "info")
    return Member(kind, proc, Lives(proc, log_dir))

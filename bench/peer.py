"""The parent side of the DBOS peer process: send a command, read its result."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from pathlib import Path
from typing import Any

from bench.processes import python_module


class DbosPeer:
    def __init__(self, system_db_url: str, log_dir: Path) -> None:
        self.process = python_module("dbos-peer", "bench.dbos_peer", [system_db_url], log_dir)

    def start(self) -> None:
        self.process.start(stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        ready = self._read()
        assert ready.get("ready"), ready

    async def run(self, workflows: int, steps: int, inflight: int) -> dict[str, Any]:
        return await asyncio.to_thread(self._run, workflows, steps, inflight)

    def _run(self, workflows: int, steps: int, inflight: int) -> dict[str, Any]:
        proc = self.process.proc
        assert proc is not None and proc.stdin is not None
        cmd = {"workflows": workflows, "steps": steps, "inflight": inflight}
        proc.stdin.write((json.dumps(cmd) + "\n").encode())
        proc.stdin.flush()
        return self._read()

    def _read(self) -> dict[str, Any]:
        proc = self.process.proc
        assert proc is not None and proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the DBOS peer exited\n{self.process.log_tail()}")
        result: dict[str, Any] = json.loads(line)
        return result

    def stop(self) -> None:
        proc = self.process.proc
        if proc is not None and proc.stdin is not None and not proc.stdin.closed:
            proc.stdin.close()  # end of commands: it destroys DBOS and exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
        self.process.stop()

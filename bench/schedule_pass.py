"""`python -m bench.schedule_pass`: the CPU of one schedule-runner pass.

    .venv/bin/python -m bench.schedule_pass            # 2,000 schedules, SQLite
    .venv/bin/python -m bench.schedule_pass --schedules 200

Starts a server in this process on a new SQLite file, creates that many
schedules through the SDK (a daily cron, so none comes due), lets one pass look
at them all, then prints the CPU time (this process's) per pass over the next
passes. A pass reads only the schedules due, so this stays flat as schedules
are added; it grew with every schedule before `due_at` (migration 0012).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from orchestrator.config import ServerConfig
from orchestrator.schedules.runner import ScheduleRunner
from orchestrator.server import Server
from sdk import AsyncClient


async def cpu_per_pass(schedules: int, passes: int, folder: Path) -> float:
    """Milliseconds of CPU per pass, over `passes` passes after the first."""
    node = Server(ServerConfig(db_url=f"sqlite:///{folder / 'weft.db'}", listen="127.0.0.1:0"))
    await node.start()
    try:
        async with AsyncClient(f"127.0.0.1:{node.port}") as client:
            for n in range(schedules):
                await client.create_schedule(f"s{n}", workflow_type="t", cron="0 3 * * *")
        store, service = node._store, node._service
        assert store is not None and service is not None
        runner = ScheduleRunner(store, service.start, lambda: True)
        await runner.pass_once()  # (each new schedule is looked at once)
        began = time.process_time()
        for _ in range(passes):
            await runner.pass_once()
        return (time.process_time() - began) / passes * 1000
    finally:
        await node.stop(grace=0.5)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.schedule_pass")
    parser.add_argument("--schedules", type=int, default=2000)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="weft-schedules-") as tmp:
        ms = asyncio.run(cpu_per_pass(args.schedules, args.passes, Path(tmp)))
    print(f"{args.schedules} schedules, none due: {ms:.1f} ms of CPU per pass")


if __name__ == "__main__":
    main()

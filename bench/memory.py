"""`python -m bench.memory`: what the server holds in memory for open runs with
large payloads.

    .venv/bin/python -m bench.memory                    # 200 runs x 8 signals of 200 KB
    .venv/bin/python -m bench.memory --runs 400

Starts `weft server` on a SQLite file of its own, starts `--runs` workflows on
a task list no decider polls (so they stay open), sends each of them
`--signals` signals of `--kb` kB (each within the payload limit), and prints
the server's resident memory before the signals and after them. What the
server keeps of those payloads is bounded by its run cache (README "Hostile
and careless input"), so the figure after stays about the same as the runs
grow; without the bound it grew with every run.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.processes import WeftServer
from bench.procstat import resident_mib
from sdk import AsyncClient


async def measure(runs: int, signals: int, kb: int, log_dir: Path) -> tuple[float, float]:
    """The server's resident MiB (before the signals, after them)."""
    server = WeftServer("memory-server", f"sqlite:///{log_dir}/memory.db", log_dir, "warning")
    server.start()
    try:
        await server.wait_serving()
        async with AsyncClient(server.address, identity="bench-memory") as client:
            ids = [
                (await client.start_workflow("quiet", task_list="nobody")).workflow_id
                for _ in range(runs)
            ]
            before = resident_mib(server.pid)
            pad = "x" * (kb * 1000)
            for _ in range(signals):
                for workflow_id in ids:
                    await client.signal(workflow_id, "pad", pad)
            server.check_alive()
            return before, resident_mib(server.pid)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--signals", type=int, default=8)
    parser.add_argument("--kb", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="weft-memory-") as tmp:
        before, after = asyncio.run(measure(args.runs, args.signals, args.kb, Path(tmp)))
    print(
        f"{args.runs} open runs x {args.signals} signals of {args.kb} kB:"
        f" server resident memory {before:.0f} -> {after:.0f} MiB"
    )


if __name__ == "__main__":
    main()

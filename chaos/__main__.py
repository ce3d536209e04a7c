"""`python -m chaos`: run the chaos modes in turn, print their figures, exit 1
if anything was lost, duplicated, stuck or wrong (or a process died unasked)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from chaos import pgcluster
from chaos.report import report
from chaos.run import MODES, Mode, Options, run_mode
from orchestrator import logging as weft_logging


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    p.add_argument("--minutes", type=float, default=10.0, help="the whole run's budget")
    p.add_argument("--mode", choices=[*MODES, "all"], default="all")
    p.add_argument("--workflows", type=int, default=200, help="per mode")
    p.add_argument(
        "--postgres",
        default=os.environ.get("WEFT_TEST_POSTGRES_URL", ""),
        help="a shared PostgreSQL server (a database of the run's own is made on it; the"
        " server is never restarted) for when no cluster of the run's own can be created"
        " (default: $WEFT_TEST_POSTGRES_URL)",
    )
    p.add_argument(
        "--own-cluster",
        choices=["auto", "yes", "no"],
        default="auto",
        help="create a PostgreSQL cluster of the run's own (pg_createcluster), which the"
        " run may crash and restart; auto: when the machine allows it",
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--log-dir", type=Path, default=None)
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.workflows <= 0:
        p.error("--minutes and --workflows must be positive")
    return args


def postgres_plan(args: argparse.Namespace) -> tuple[bool, str]:
    """(own cluster?, why PostgreSQL modes are skipped or ""), by --own-cluster."""
    why_not = pgcluster.why_not_own()
    if args.own_cluster == "yes" and why_not:
        return False, f"--own-cluster yes, but {why_not}"
    if args.own_cluster != "no" and not why_not:
        return True, ""
    if args.postgres:
        return False, ""
    reason = why_not or "--own-cluster no"
    return False, f"no cluster of its own ({reason}) and no --postgres/WEFT_TEST_POSTGRES_URL"


async def main(args: argparse.Namespace) -> int:
    own, skip = postgres_plan(args)
    modes: list[Mode] = list(MODES) if args.mode == "all" else [args.mode]
    if skip:
        if args.mode not in ("all", "sqlite"):
            print(f"chaos: cannot run {args.mode}: {skip}", file=sys.stderr)
            return 2
        print(f"chaos: PostgreSQL modes skipped: {skip}")
        modes = ["sqlite"]
    if not own and args.postgres and modes != ["sqlite"]:
        unreachable = pgcluster.why_unreachable(args.postgres)
        if unreachable:
            print(f"chaos: cannot use --postgres: {unreachable}", file=sys.stderr)
            return 2
    if own:
        for name in pgcluster.drop_orphans():
            print(f"chaos: dropped {name}, left behind by a chaos run that was killed")
    seed = args.seed if args.seed is not None else int(time.time())
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="weft-chaos-"))
    print(f"chaos: seed {seed}, logs in {log_dir}, {args.minutes:g} minutes", flush=True)
    budget = args.minutes * 60 / len(modes)
    failed = False
    for i, mode in enumerate(modes):
        opts = Options(
            mode=mode,
            workflows=args.workflows,
            seconds=budget,
            log_dir=log_dir / mode,
            own_cluster=own,
            postgres_url=args.postgres,
            seed=seed + i,
        )
        figures = await run_mode(opts)
        print("\n".join(report(figures)), flush=True)
        failed = failed or not figures.ok
    print("chaos: FAILED" if failed else "chaos: all histories check out")
    return 1 if failed else 0


async def interruptible(args: argparse.Namespace) -> int:
    """`main`, cancelled by SIGTERM as by Ctrl-C, so its clean-up (processes
    stopped, the database or cluster dropped) runs either way."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await main(args)
    except asyncio.CancelledError:
        print("chaos: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    weft_logging.configure("warning")  # the driver's retries are expected: not news
    try:
        sys.exit(asyncio.run(interruptible(parse(sys.argv[1:]))))
    except KeyboardInterrupt:
        sys.exit(130)

"""`python -m bench.hotpath`: profile the server's hot path under the bench's load.

    .venv/bin/python -m bench.hotpath                 # PostgreSQL, 4 in flight
    .venv/bin/python -m bench.hotpath --inflight 16 --workflows 200 --py-spy
    .venv/bin/python -m bench.hotpath --sqlite
    .venv/bin/python -m bench.hotpath --embed           # one process: weft server --embed
    .venv/bin/python -m bench.hotpath --perf            # the server's native code (Linux perf)
    .venv/bin/python -m bench.hotpath --census          # the server's loop: wake-ups, tasks

Starts `weft server` with a `weft decider` and a `weft runner` on
`bench.workload` (as `make bench` does, on a database of its own; with
`--embed`, one `weft server --embed bench.workload` instead), runs a
warm-up batch, then a timed batch of the `bench-chain` workflow, and prints per
completed activity: the server's CPU (and the decider's, the runner's and, when
the cluster runs on this machine, PostgreSQL's: `bench.pg_cpu`), the RPCs it
answered (by method), the SQL statements it sent and the transactions it
committed (its own counters), and on PostgreSQL the transactions the database
counted (`pg_stat_database`), and, when the cluster runs on this machine, the
WAL records it wrote, by table and kind (`bench.pg_wal`). With
`--py-spy` (py-spy comes with the bench extra), it also samples the server
during the timed batch and prints where its CPU went, by layer and by function.
With `--perf`, Linux perf samples it instead and the split is by native code
(the interpreter, the kernel, gRPC's core, protobuf, libpq:
`bench.native_profile`). With `--census`, the process runs with its event loop
instrumented, and the bench prints per activity how often the loop went idle
and what woke it, the callbacks it ran and the tasks made (`bench.loop_census`).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from bench import native_profile, pg_wal, pgdb
from bench.drive import Batch, Completions, run_batch, sample_hand_offs
from bench.processes import PYTHON, REPO, Counts, Process
from bench.rig import WeftNode
from bench.stats import percentile

DATABASE = "weft_hotpath"
# Where a sampled frame's file lies decides its layer; the first match wins.
LAYERS = (
    ("psycopg", "psycopg"),
    ("sqlalchemy", "SQLAlchemy"),
    ("aiosqlite", "aiosqlite/sqlite3"),
    ("sqlite3", "aiosqlite/sqlite3"),
    ("grpc", "gRPC"),
    ("google/protobuf", "protobuf"),
    ("structlog", "logging"),
    ("prometheus_client", "metrics"),
    ("orchestrator/", "Weft"),
    ("sdk/", "Weft"),
    ("asyncio", "asyncio"),
)


async def profile(args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    if args.sqlite:
        db_url = f"sqlite:///{log_dir}/hotpath.db"
    else:
        pgdb.recreate(args.postgres, DATABASE)
        db_url = pgdb.url(args.postgres, DATABASE)
    # (instrumented from its start: the loop's classes are patched before it is made)
    launchers = (
        {args.census: [PYTHON, "-m", "bench.loop_census", str(log_dir)]} if args.census else None
    )
    node = await WeftNode.start(
        "hotpath",
        db_url,
        log_dir,
        "warning",
        args.server_workers,
        embed=args.embed,
        launchers=launchers,
        event_loop=args.event_loop,
    )
    completions = await Completions.open()

    async def batch(workflows: int, prefix: str) -> Batch:
        return await run_batch(
            node.client,
            completions,
            workflow_type="bench-chain",
            task_list="bench",
            workflows=workflows,
            steps=args.steps,
            inflight=args.inflight,
            prefix=prefix,
        )

    try:
        await batch(max(4, args.workflows // 5), "warm")
        if not args.sqlite:  # (so that none of the warm-up's transactions count below)
            await asyncio.sleep(STATS_PUBLISHED)
        target = {"server": node.server, "decider": node.decider, "runner": node.runner}
        spied = target[args.py_spy] if args.py_spy else None
        assert spied is not None or not args.py_spy  # (main refused --embed with another)
        spy = _start_py_spy(spied.pid, log_dir) if spied is not None else None
        recorded = target[args.perf] if args.perf else None
        assert recorded is not None or not args.perf
        perf = native_profile.start(recorded.pid, log_dir) if recorded is not None else None
        counted = target[args.census] if args.census else None
        assert counted is not None or not args.census
        if counted is not None:
            os.kill(counted.pid, signal.SIGUSR1)  # (the warm-up's counts are dropped)
        probe = node.pg_probe  # (None on SQLite)
        pg0 = None if probe is None else probe.sample()  # (before xacts0: it commits)
        wal_probe = None if args.sqlite else pg_wal.WalProbe.open(db_url)
        wal0 = wal_probe.position() if isinstance(wal_probe, pg_wal.WalProbe) else ""
        counts0, cpu0, xacts0 = node.server.counts(), node.server.cpu(), _xacts(args, db_url)
        decider0, runner0 = _cpu(node.decider), _cpu(node.runner)
        timed = await batch(args.workflows, "timed")
        wal1 = wal_probe.position() if isinstance(wal_probe, pg_wal.WalProbe) else ""
        cpu = node.server.cpu() - cpu0
        decider_cpu, runner_cpu = _cpu(node.decider) - decider0, _cpu(node.runner) - runner0
        pg1 = None if probe is None or pg0 is None else probe.sample()
        pg_cpu = None if pg0 is None or pg1 is None else pg1.since(pg0)
        counts = node.server.counts() - counts0
        # The samplers stop with the timed batch: what comes after is idle time.
        spy_out = _stop_py_spy(spy) if spy is not None else None
        if perf is not None:
            native_profile.stop(perf)
        census = await _census(counted, log_dir) if counted is not None else None
        if not args.sqlite:  # (the server's periodic work meanwhile counts too: a few)
            await asyncio.sleep(STATS_PUBLISHED)
        xacts = _xacts(args, db_url) - xacts0
        node.check_alive()
        legs, _ = await sample_hand_offs(node.client, timed.workflow_ids)
        wal = wal_probe.read(wal0, wal1) if isinstance(wal_probe, pg_wal.WalProbe) else wal_probe
    finally:
        await node.stop()
        if not args.sqlite:
            pgdb.drop(args.postgres, DATABASE)
    activities = args.workflows * args.steps
    return {
        "activities": activities,
        "seconds": timed.seconds,
        "legs": legs,
        "counts": counts,
        "cpu": cpu,
        "decider_cpu": decider_cpu,
        "runner_cpu": runner_cpu,
        "pg_cpu": pg_cpu,
        "xacts": xacts,
        "wal": wal,
        "spy": spy_out,
        "census": census,
        # (perf's reports take seconds: read once the processes are gone)
        "perf": native_profile.summarise(perf) if perf is not None else None,
    }


async def _census(proc: Process, log_dir: Path) -> dict[str, Any]:
    """The process's loop counts since SIGUSR1 (`bench.loop_census`)."""
    path = log_dir / f"census.{proc.pid}.json"
    os.kill(proc.pid, signal.SIGUSR2)
    for _ in range(100):
        if path.exists():
            counts: dict[str, Any] = json.loads(path.read_text())
            counts["file"] = str(path)
            return counts
        proc.check_alive()
        await asyncio.sleep(0.1)
    raise SystemExit(f"bench.hotpath: {proc.name} wrote no census to {path} within 10 s")


def _cpu(proc: Process | None) -> float:
    return proc.cpu() if proc is not None else 0.0  # (--embed: counted in the server's)


STATS_PUBLISHED = 10.5
"""Seconds after which every backend has published its transaction counts to
`pg_stat_database`: a busy one publishes them at most once a second, and what
it holds when it goes idle 10 s later (PostgreSQL's PGSTAT_IDLE_INTERVAL)."""


def _xacts(args: argparse.Namespace, db_url: str) -> float:
    if args.sqlite:
        return 0.0
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = current_database()"
        ).fetchone()
    return float(row[0]) if row else 0.0


def _py_spy() -> str:
    exe = shutil.which("py-spy") or str(REPO / ".venv/bin/py-spy")
    if not Path(exe).exists():
        raise SystemExit(
            "bench.hotpath: --py-spy needs py-spy, which the bench extra installs"
            " (make .venv/.bench-installed)"
        )
    return exe


def _start_py_spy(pid: int, log_dir: Path) -> tuple[subprocess.Popen[bytes], Path]:
    exe = _py_spy()
    out = log_dir / "server.folded"
    proc = subprocess.Popen(
        [exe, "record", "-p", str(pid), "-f", "raw", "-r", "200", "-o", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # attached before the timed batch starts
    return proc, out


def _stop_py_spy(spy: tuple[subprocess.Popen[bytes], Path]) -> dict[str, Any]:
    proc, out = spy
    proc.send_signal(subprocess.signal.SIGINT)  # type: ignore[attr-defined]
    proc.wait(timeout=30)
    layers: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[str] = collections.Counter()
    for frames, n in read_folded(out.read_text(errors="replace")):
        functions[frames[-1]] += n
        layers[_layer(frames)] += n
    return {"layers": layers, "functions": functions, "file": str(out)}


def read_folded(text: str) -> list[tuple[list[str], int]]:
    """py-spy's folded stacks as (frames, outermost first; samples). Split on
    newlines only: `str.splitlines` also breaks on characters such as \\x1c or
    \\x85 that a sampled frame's text may hold; a row without its count is skipped."""
    rows: list[tuple[list[str], int]] = []
    for line in text.split("\n"):
        stack, _, count = line.rpartition(" ")
        if count.isdecimal():
            rows.append((stack.split(";"), int(count)))
    return rows


def _layer(frames: list[str]) -> str:
    """The innermost frame that belongs to a known layer names the sample's layer."""
    for frame in reversed(frames):
        for marker, name in LAYERS:
            if marker in frame:
                return name
    return "other"


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    acts = result["activities"]
    counts: Counts = result["counts"]
    lines = [
        f"{'SQLite' if args.sqlite else 'PostgreSQL'}, {args.inflight} in flight,"
        f" {args.workflows} workflows x {args.steps} activities:"
        f" {acts / result['seconds']:.0f} activities/s",
        f"server CPU per activity      {result['cpu'] / acts * 1000:8.2f} ms",
        *(
            ["(the decider and runner run inside the server: --embed)"]
            if args.embed
            else [
                f"decider CPU per activity     {result['decider_cpu'] / acts * 1000:8.2f} ms",
                f"runner CPU per activity      {result['runner_cpu'] / acts * 1000:8.2f} ms",
            ]
        ),
        *([] if args.sqlite else [_pg_cpu_line(result.get("pg_cpu"), acts)]),
        f"RPCs per activity            {sum(counts.rpcs.values()) / acts:8.2f}",
    ]
    for method, n in sorted(counts.rpcs.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {method:<28}{n / acts:8.2f}")
    lines += [
        f"SQL statements per activity  {counts.statements / acts:8.2f}",
        f"transactions per activity    {counts.transactions / acts:8.2f}",
    ]
    if not args.sqlite:
        lines.append(f"PostgreSQL xacts per act.    {result['xacts'] / acts:8.2f}")
    lines += pg_wal.render(result.get("wal"), acts)
    legs = result["legs"]
    per_lane = args.inflight / (acts / result["seconds"]) * 1000
    lines += [
        "",
        f"an activity takes its lane {per_lane:.2f} ms ({args.inflight} lanes); a run's legs, one"
        " after another, from the server's event times (p50, p90 ms; sampled runs):",
        f"  decision  DeciderStarted -> DeciderCompleted  {_p(legs.decision_leg)}",
        f"  activity  ActivityStarted -> ActivitySuccess  {_p(legs.activity_leg)}",
    ]
    spy = result["spy"]
    if spy:
        total = sum(spy["layers"].values()) or 1
        lines += ["", f"{args.py_spy} samples by layer (innermost known frame):"]
        for name, n in spy["layers"].most_common():
            lines.append(f"  {name:<20}{100 * n / total:6.1f} %")
        lines += ["", "top functions (own samples):"]
        for name, n in spy["functions"].most_common(25):
            lines.append(f"  {100 * n / total:5.1f} %  {name[:110]}")
        lines.append(f"(folded stacks in {spy['file']})")
    if result["perf"] is not None:
        lines += native_profile.render(result["perf"], args.perf)
    if result["census"] is not None:
        lines += render_census(result["census"], acts, args.census)
    return "\n".join(lines)


def _pg_cpu_line(seconds: float | None, activities: int) -> str:
    if seconds is None:
        return "PostgreSQL CPU: not counted (the cluster is not on this machine)"
    return (
        f"PostgreSQL CPU per activity  {seconds / activities * 1000:8.2f} ms"
        " (the database's backends and the cluster's own processes)"
    )


def render_census(census: dict[str, Any], activities: int, process: str) -> list[str]:
    """The loop's counts per activity, each group's largest first."""

    def per(n: float) -> str:
        return f"{n / activities:8.2f}"

    def top(counts: dict[str, int], n: int) -> list[str]:
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        rows = [f"    {name[:60]:<60}{per(count)}" for name, count in ranked[:n]]
        rest = sum(count for _, count in ranked[n:])
        return rows + ([f"    {'(the others)':<60}{per(rest)}"] if rest else [])

    return [
        "",
        f"the {process}'s event loop per activity (bench.loop_census; its times are not"
        " the run's):",
        f"  {'loop iterations':<62}{per(census['selects'])}",
        f"  {'  of which idle, until woken':<62}{per(census['waits'])}",
        f"  {'ready descriptors, by their callback':<62}{per(sum(census['woken_by'].values()))}",
        *top(census["woken_by"], 6),
        f"  {'callbacks run':<62}{per(sum(census['callbacks'].values()))}",
        *top(census["callbacks"], 10),
        f"  {'tasks created':<62}{per(sum(census['tasks'].values()))}",
        *top(census["tasks"], 6),
        f"(counts in {census['file']})",
    ]


def _p(values: list[float]) -> str:
    return f"{percentile(values, 50):6.2f} {percentile(values, 90):6.2f}  (n={len(values)})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__)
    parser.add_argument("--inflight", type=int, default=4)
    parser.add_argument("--workflows", type=int, default=100)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--sqlite", action="store_true", help="profile on SQLite instead")
    parser.add_argument("--server-workers", type=int, default=1, help="weft server --workers N")
    parser.add_argument(
        "--embed",
        action="store_true",
        help="the decider and runner inside the server (weft server --embed bench.workload)",
    )
    parser.add_argument(
        "--event-loop",
        choices=("auto", "uvloop", "asyncio"),
        help="every weft process's --event-loop (default: each command's own; with --embed,"
        " auto is asyncio's loop)",
    )
    # One sampler at a time: each slows what the other would measure.
    samplers = parser.add_mutually_exclusive_group()
    samplers.add_argument(
        "--census",
        nargs="?",
        const="server",
        choices=("server", "decider", "runner"),
        help="count this process's event loop work per activity (default: the server)",
    )
    for flag, tool in (("--py-spy", "py-spy"), ("--perf", "Linux perf, by native code")):
        samplers.add_argument(
            flag,
            nargs="?",
            const="server",
            choices=("server", "decider", "runner"),
            help=f"sample this process (default: the server) with {tool}",
        )
    args = parser.parse_args(argv)
    sampled = args.py_spy or args.perf or args.census
    if args.embed and sampled not in (None, "server"):
        parser.error(f"with --embed the {sampled} runs inside the server: sample the server")
    if args.census and args.event_loop:
        parser.error("--census counts asyncio's loop: not with --event-loop")
    if sampled and args.server_workers > 1:
        # (The pid at hand is the supervisor's, which serves no call.)
        parser.error("a sampler watches one process: not with --server-workers")
    if args.py_spy:
        _py_spy()  # said before anything starts, not after the warm-up
    if args.perf:
        native_profile.perf_exe()
    with tempfile.TemporaryDirectory(prefix="weft-hotpath-") as tmp:
        log_dir = Path(tmp) if not sampled else Path(tempfile.mkdtemp(prefix="weft-profile-"))
        result = asyncio.run(profile(args, log_dir))
    print(render(result, args))


if __name__ == "__main__":
    main()

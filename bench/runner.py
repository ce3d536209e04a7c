"""`python -m bench [--quick]`: set up, run every scenario, write
bench/results/latest.json and print the table.

Set-up: fresh databases on the local PostgreSQL (dropped at the end), a real
`weft server` on one of them with a `weft decider` and a `weft runner`, the
gRPC echo server, the DBOS peer on another, and the bare-append tables on a
third. A scenario that fails is reported as an error; the others still run."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import platform
import shutil
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import append, pgdb
from bench.drive import Completions
from bench.peer import DbosPeer
from bench.processes import REPO, free_port, python_module
from bench.procstat import machine
from bench.profile import FULL, QUICK, Profile
from bench.report import render, targets
from bench.rig import Rig, WeftNode
from bench.scenarios import (
    dispatch,
    growth,
    one_process,
    secured,
    side_by_side,
    sqlite,
    steps,
    two_nodes,
)

RESULTS = REPO / "bench" / "results"
WEFT_DB, DBOS_DB, APPEND_DB = "weft_bench", "dbos_bench", "bench_append"

Scenario = Callable[[Rig, Callable[[str], None]], Awaitable[dict[str, Any]]]
SCENARIOS: dict[str, Scenario] = {
    "side_by_side": side_by_side.run,
    "history_growth": growth.run,
    "dispatch": dispatch.run,
    "steps": steps.run,
    "sqlite": sqlite.run,
    "two_nodes": two_nodes.run,
    "secured": secured.run,
    "one_process": one_process.run,
}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for package in ("weft", "grpcio", "protobuf", "psycopg", "sqlalchemy", "uvloop", "dbos"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


async def run(profile: Profile, admin_url: str, only: list[str], log_level: str) -> dict[str, Any]:
    started = time.monotonic()
    settings = pgdb.settings(admin_url)
    if settings["synchronous_commit"] != "on" or settings["fsync"] != "on":
        raise SystemExit(
            "bench: PostgreSQL must run with synchronous_commit=on and fsync=on"
            f" (it has {settings['synchronous_commit']}, {settings['fsync']}):"
            " the figures must be durable ones"
        )
    doc: dict[str, Any] = {
        "profile": profile.name,
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "versions": versions(),
        "postgres": settings,
        "settings": {
            "profile": profile.__dict__,
            "weft_log_level": log_level,
            "sqlite": "journal_mode=WAL, synchronous=FULL (Weft's own)",
        },
        "scenarios": {},
    }
    log_dir = RESULTS / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)
    log_dir.mkdir(parents=True)
    for database in (WEFT_DB, DBOS_DB, APPEND_DB):
        pgdb.recreate(admin_url, database)
    append_url = pgdb.url(admin_url, APPEND_DB)
    append.prepare(append_url, max(profile.inflight))
    echo_port = free_port()
    echo_server = python_module("echo-server", "bench.echo", [str(echo_port)], log_dir).start()
    floor_port = free_port()
    floor_server = python_module(
        "floor-server", "bench.floor", [str(floor_port), append_url], log_dir
    ).start()
    peer = DbosPeer(
        pgdb.url(admin_url, DBOS_DB).replace("postgresql://", "postgresql+psycopg://"), log_dir
    )
    node: WeftNode | None = None
    try:
        log("starting weft server, decider and runner on PostgreSQL; the DBOS peer")
        node = await WeftNode.start("pg", pgdb.url(admin_url, WEFT_DB), log_dir, log_level)
        await asyncio.to_thread(peer.start)
        rig = Rig(
            profile=profile,
            log_dir=log_dir,
            log_level=log_level,
            pg=node,
            echo=echo_server,
            echo_address=f"127.0.0.1:{echo_port}",
            floor=floor_server,
            floor_address=f"127.0.0.1:{floor_port}",
            peer=peer,
            append_url=append_url,
            admin_url=admin_url,
            completions=await Completions.open(),
        )
        for name, scenario in SCENARIOS.items():
            if only and name not in only:
                continue
            try:
                doc["scenarios"][name] = await scenario(rig, log)
            except Exception as exc:
                log(f"{name} failed: {type(exc).__name__}: {exc}")
                traceback.print_exc()
                doc["scenarios"][name] = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        peer.stop()
        if node is not None:
            await node.stop()
        echo_server.stop()
        floor_server.stop()
        for database in (WEFT_DB, DBOS_DB, APPEND_DB):
            pgdb.drop(admin_url, database)
    doc["targets"] = targets(doc["scenarios"])
    doc["duration_s"] = round(time.monotonic() - started, 1)
    return doc


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the short set (under two minutes)")
    parser.add_argument(
        "--postgres",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="admin URL of the PostgreSQL cluster; the bench creates and drops its own databases",
    )
    parser.add_argument("--only", nargs="*", default=[], choices=sorted(SCENARIOS))
    parser.add_argument(
        "--log-level",
        default="warning",
        help="of the weft processes (info logs a line per task, which costs CPU)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    args = parser.parse_args(argv)
    profile = QUICK if args.quick else FULL
    doc = asyncio.run(run(profile, args.postgres, args.only, args.log_level))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(render(doc))
    print(f"\n{args.out} written ({doc['duration_s']} s)")

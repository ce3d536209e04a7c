"""Scenario 8, what TLS and authentication cost.

The throughput workload against a second node on its own PostgreSQL database
started with `--tls-cert/--tls-key --auth`, its decider and runner calling with
a worker API key over TLS and the driver with a starter key, taking turns with
the plain node within each repeat, at the largest in-flight count. The
certificate is a self-signed P-256 one made by `openssl` for 127.0.0.1.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench import pgdb
from bench.processes import WEFT
from bench.rig import Rig, Secured, WeftNode
from bench.scenarios.throughput import weft_batch
from bench.stats import ratio, spread

SECURED_DB = "weft_bench_secured"


def _certificate(directory: Path) -> tuple[str, str]:
    cert, key = directory / "bench-tls.pem", directory / "bench-tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


def _weft(*args: str, api_key: str = "", ca: str = "") -> str:
    """One `weft` command's stdout (an admin's, before and after the server starts)."""
    extra = ["--tls-ca", ca, "--api-key", api_key] if api_key else []
    done = subprocess.run([WEFT, *args, *extra], check=True, capture_output=True, text=True)
    return done.stdout.strip()


async def run(rig: Rig, log: Any) -> dict[str, Any]:
    profile = rig.profile
    inflight = max(profile.inflight)
    pgdb.recreate(rig.admin_url, SECURED_DB)
    db_url = pgdb.url(rig.admin_url, SECURED_DB)
    cert, key = _certificate(rig.log_dir)
    admin = _weft("auth", "bootstrap", "--db", db_url)
    # Keys are made through a node; a first one, plain, only for that.
    maker = await WeftNode.start(
        "pg-secured-setup",
        db_url,
        rig.log_dir,
        rig.log_level,
        secured=Secured(cert, key, cert, admin, admin),
    )
    try:
        address = ["--address", maker.server.address]
        worker_key = _weft(
            "auth", "key", "create", "--role", "worker", *address, api_key=admin, ca=cert
        )
        driver_key = _weft(
            "auth", "key", "create", "--role", "starter", *address, api_key=admin, ca=cert
        )
    finally:
        await maker.stop()
    node = await WeftNode.start(
        "pg-secured",
        db_url,
        rig.log_dir,
        rig.log_level,
        secured=Secured(cert, key, cert, worker_key, driver_key),
    )
    try:
        log(f"TLS and auth: {inflight} in flight, warm-up")
        await weft_batch(
            rig, node, inflight=inflight, workflows=profile.warmup_workflows, timed=False
        )
        series: dict[str, list[float]] = defaultdict(list)
        for repeat in range(profile.repeats):
            log(f"TLS and auth: {inflight} in flight, repeat {repeat + 1}")
            plain = await weft_batch(rig, rig.pg, inflight=inflight, workflows=profile.workflows)
            secured = await weft_batch(rig, node, inflight=inflight, workflows=profile.workflows)
            for name in ("activities_per_s", "server_cpu_per_activity_ms", "server_cpu_cores"):
                series[f"plain.{name}"].append(plain[name])
                series[f"secured.{name}"].append(secured[name])
            series["ratio.secured_over_plain_activities_per_s"].append(
                ratio(secured["activities_per_s"], plain["activities_per_s"])
            )
            series["ratio.secured_over_plain_server_cpu_per_activity"].append(
                ratio(secured["server_cpu_per_activity_ms"], plain["server_cpu_per_activity_ms"])
            )
        return {"inflight": inflight, **{k: spread(v) for k, v in series.items()}}
    finally:
        await node.stop()
        pgdb.drop(rig.admin_url, SECURED_DB)

"""The peer: the same workload in DBOS Transact, run as a process of its own
(`python -m bench.dbos_peer SYSTEM_DB_URL`), on the same PostgreSQL.

A DBOS workflow of K trivial steps (`x + 1`), started from `inflight` threads
that each run workflows back to back (DBOS runs a workflow in the calling
thread; threads are its fastest mode on this machine, perf-anchors C.1).
The parent sends one JSON command per line on stdin and reads one JSON result
per line on stdout, so DBOS and Weft can take turns within one run."""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dbos import DBOS, DBOSConfig

from bench.procstat import cpu_seconds, machine_busy_seconds
from bench.stats import percentile

_step_latencies: list[float] = []


@DBOS.step()
def trivial_step(x: int) -> int:
    return x + 1


@DBOS.workflow()
def chain(steps: int) -> int:
    x = 0
    for _ in range(steps):
        t0 = time.perf_counter()
        x = trivial_step(x)
        _step_latencies.append(time.perf_counter() - t0)  # list.append is atomic
    return x


def run(workflows: int, steps: int, inflight: int) -> dict[str, Any]:
    _step_latencies.clear()
    counter = itertools.count()
    lock = threading.Lock()

    def loop() -> None:
        while True:
            with lock:
                i = next(counter)
            if i >= workflows:
                return
            assert chain(steps) == steps

    machine0, cpu0, t0 = machine_busy_seconds(), cpu_seconds(os.getpid()), time.perf_counter()
    with ThreadPoolExecutor(inflight) as pool:
        for future in [pool.submit(loop) for _ in range(inflight)]:
            future.result()
    seconds, cpu = time.perf_counter() - t0, cpu_seconds(os.getpid()) - cpu0
    machine = machine_busy_seconds() - machine0
    return {
        "workflows": workflows,
        "steps": workflows * steps,
        "seconds": seconds,
        "cpu_s": cpu,
        "machine_cpu_s": machine,
        "step_p50_ms": percentile(_step_latencies, 50) * 1000,
        "step_p99_ms": percentile(_step_latencies, 99) * 1000,
    }


def main() -> None:
    config: DBOSConfig = {
        "name": "weft-bench-peer",
        "system_database_url": sys.argv[1],
        "log_level": "WARNING",
        # Enough connections for 16 threads in flight plus DBOS's own.
        "sys_db_pool_size": 40,
    }
    DBOS(config=config)
    DBOS.launch()
    print(json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            result = run(int(cmd["workflows"]), int(cmd["steps"]), int(cmd["inflight"]))
            print(json.dumps(result), flush=True)
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    main()

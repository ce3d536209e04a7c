"""`weft server --workers N`: N server processes on one port.

Python runs one core per process, so a machine's cores serve through several
processes. Each is a full node of the PostgreSQL cluster (its own cache, its own
long polls, LISTEN/NOTIFY between them, as between machines), bound to the same
address with SO_REUSEPORT: the kernel spreads new connections over them. This
process only starts them, restarts one that dies (with a growing pause if it
keeps dying at once), and passes SIGTERM / SIGINT on so they drain and exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import structlog

from orchestrator.upkeep.membership import default_node_name

log = structlog.get_logger("weft.supervisor")

RESTART_PAUSE = 1.0
MAX_RESTART_PAUSE = 30.0
QUICK_DEATH = 10.0  # seconds: a worker that dies sooner than this is paused longer
STOP_GRACE = 60.0


def _worker(settings: dict[str, str], index: int, workers: int) -> subprocess.Popen[bytes]:
    """Start worker `index` of `workers`: `weft server --reuse-port` with the
    server's settings in WEFT_* variables (a password in the database URL stays
    out of `ps`), its metrics (if any) on the metrics port plus its index."""
    # Without WEFT_WORKERS: a worker that read it would start workers of its own.
    env = {k: v for k, v in os.environ.items() if k != "WEFT_WORKERS"} | settings
    metrics = settings.get("WEFT_METRICS_LISTEN", "")
    if metrics:
        host, _, port = metrics.rpartition(":")
        env["WEFT_METRICS_LISTEN"] = f"{host}:{int(port) + index}"
    # Each process is a node of its own in `weft nodes`, under a name that
    # stays the same when the supervisor restarts it.
    base = settings.get("WEFT_NODE_NAME") or default_node_name(settings.get("WEFT_LISTEN", ""))
    env["WEFT_NODE_NAME"] = f"{base}#{index}"
    # -P: the working directory stays off sys.path, so a `cli.py` or `cli/` of the
    # user's own there cannot stand in for the command.
    # (`--workers` beside `--reuse-port` only tells it how many share the port:
    # its clients spread their poll connections over them.)
    argv = [sys.executable, "-P", "-m", "cli", "server", "--reuse-port", "--workers", str(workers)]
    return subprocess.Popen(argv, env=env)


def supervise(settings: dict[str, str], workers: int) -> int:
    """Run `workers` server processes until SIGTERM or SIGINT; 0 if they all
    stopped cleanly."""
    # An Event rather than a bool the handler rebinds: the flag changes behind
    # the loop's back, which a type checker narrowing a local cannot see.
    stopping = threading.Event()
    procs: list[subprocess.Popen[bytes]] = []

    def stop(signum: int, _frame: object) -> None:
        stopping.set()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    # Before the first process starts: a signal between two starts would
    # otherwise end this process and leave the ones started serving the port.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    started: list[float] = []
    pauses: list[float] = []
    for index in range(workers):
        if stopping.is_set():
            break
        procs.append(_worker(settings, index, workers))
        started.append(time.monotonic())
        pauses.append(RESTART_PAUSE)
    if stopping.is_set():  # (during a start: the process it made was not yet listed)
        stop(signal.SIGTERM, None)
    log.info("supervisor.started", workers=workers, pids=[p.pid for p in procs])
    while not stopping.is_set():
        time.sleep(0.2)
        for index, proc in enumerate(procs):
            code = proc.poll()
            if code is None or stopping.is_set():
                continue
            lived = time.monotonic() - started[index]
            pause = pauses[index] if lived < QUICK_DEATH else RESTART_PAUSE
            log.warning("supervisor.worker_exited", pid=proc.pid, code=code, restart_in=pause)
            time.sleep(pause)
            pauses[index] = min(pause * 2, MAX_RESTART_PAUSE)
            if stopping.is_set():
                break
            procs[index] = _worker(settings, index, workers)
            started[index] = time.monotonic()
    deadline = time.monotonic() + STOP_GRACE
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.info("supervisor.stopped")
    return 0 if all(p.returncode in (0, -signal.SIGTERM) for p in procs) else 1

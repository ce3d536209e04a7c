"""`weft server --workers N`: N server processes on one port.

Python runs one core per process, so a machine's cores serve through several
processes. Each is a full node of the PostgreSQL cluster (its own cache, its own
long polls, LISTEN/NOTIFY between them, as between machines), bound to the same
address with SO_REUSEPORT: the kernel spreads new connections over them. This
process only starts them, restarts one that dies (with a growing pause if it
keeps dying at once), stops them all when one refuses its settings at its first
start (exit 2: no restart would do better), and passes SIGTERM / SIGINT on so they
drain and exit (and SIGHUP, so they read their TLS files again).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import structlog

from cli.errors import EXIT_USAGE
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
    env["WEFT_METRICS_LISTEN"] = worker_metrics_listen(
        settings.get("WEFT_METRICS_LISTEN", ""), index
    )
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


def worker_metrics_listen(address: str, index: int) -> str:
    """Where worker `index` serves its metrics: the port of `address` (HOST:PORT,
    or "" for none) plus the index. ValueError past the last port: the
    command checks the last worker's before any starts."""
    if not address:
        return ""
    host, _, port = address.rpartition(":")
    if int(port) + index > 65535:
        raise ValueError(
            f"{address!r} leaves no port for the metrics of worker {index + 1}"
            f" (each takes the next port): give a port up to {65535 - index}"
        )
    return f"{host}:{int(port) + index}"


def supervise(settings: dict[str, str], workers: int) -> int:
    """Run `workers` server processes until SIGTERM or SIGINT (or SIGHUP without
    TLS); 0 if they all stopped cleanly, 2 if one refused its settings."""
    # An Event rather than a bool the handler rebinds: the flag changes behind
    # the loop's back, which a type checker narrowing a local cannot see.
    stopping = threading.Event()
    procs: dict[int, subprocess.Popen[bytes]] = {}
    started: dict[int, float] = {}

    def pass_on(signum: int) -> None:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signum)

    def stop(_signum: int, _frame: object) -> None:
        stopping.set()
        pass_on(signal.SIGTERM)

    def start(index: int) -> None:
        procs[index] = _worker(settings, index, workers)
        started[index] = time.monotonic()
        # A signal during the start found the process not yet listed. (One after
        # the listing reaches it twice: a process of --workers takes that as once.)
        if stopping.is_set():
            procs[index].send_signal(signal.SIGTERM)

    # Before the first process starts: a signal between two starts would
    # otherwise end this process and leave the ones started serving the port.
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # SIGHUP reloads a node's TLS files, and ends one without TLS: here too,
    # rather than ending only this process and leaving its workers serving.
    if settings.get("WEFT_TLS_CERT"):
        signal.signal(signal.SIGHUP, lambda signum, _frame: pass_on(signum))
    else:
        signal.signal(signal.SIGHUP, stop)
    for index in range(workers):
        if stopping.is_set():
            break
        start(index)
    log.info("supervisor.started", workers=workers, pids=[p.pid for p in procs.values()])
    pauses = dict.fromkeys(procs, RESTART_PAUSE)
    restarted: set[int] = set()
    refused = False
    while not stopping.is_set():
        stopping.wait(0.2)
        for index, proc in procs.items():
            code = proc.poll()
            if code is None or stopping.is_set():
                continue
            if code == EXIT_USAGE and index not in restarted:
                # Settings refused at the first start (the process said why):
                # every process refuses them, at every restart. A restarted one
                # is restarted again: its fellows serve meanwhile, and what it
                # refuses (a module, a file) may have changed and be put back.
                log.error("supervisor.settings_refused", pid=proc.pid, code=code)
                refused = True
                stop(signal.SIGTERM, None)
                break
            lived = time.monotonic() - started[index]
            pause = pauses[index] if lived < QUICK_DEATH else RESTART_PAUSE
            log.warning("supervisor.worker_exited", pid=proc.pid, code=code, restart_in=pause)
            stopping.wait(pause)  # (a signal ends the pause)
            pauses[index] = min(pause * 2, MAX_RESTART_PAUSE)
            if stopping.is_set():
                break
            start(index)
            restarted.add(index)
    deadline = time.monotonic() + STOP_GRACE
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.info("supervisor.stopped")
    if refused:
        return EXIT_USAGE
    return 0 if all(p.returncode in (0, -signal.SIGTERM) for p in procs.values()) else 1

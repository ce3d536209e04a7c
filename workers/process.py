"""What the two worker processes, `weft runner` (`workers.runner`) and `weft
decider` (`workers.decider`), share: the client that waits out server restarts,
and running the worker until SIGTERM or SIGINT, then exiting."""

from __future__ import annotations

import os
from typing import Any

import structlog

from sdk.client import AsyncClient
from sdk.retry import RetryPolicy
from sdk.tls import TlsConfig
from sdk.worker import Worker

# A worker process never gives up on the server: it waits out restarts.
WORKER_RETRY = RetryPolicy(give_up_after=None)


def worker_client(
    address: str,
    namespace: str,
    identity: str,
    tls: TlsConfig | None = None,
    api_key: str | None = None,
) -> AsyncClient:
    """The client of a worker process: it waits out server restarts, however long
    (a refused TLS handshake is not waited out: it raises TlsError)."""
    return AsyncClient(
        address,
        namespace=namespace,
        identity=identity or None,
        retry=WORKER_RETRY,
        tls=tls,
        api_key=api_key,
    )


def run(kind: str, worker: Worker, event_loop: str | None, **loaded: Any) -> int:
    """Log `KIND.loaded` with what the process loaded, run `worker` until SIGTERM
    (drain within its grace period) or SIGINT, and return the exit code: 0, or
    exit at once with 1 when tasks were abandoned, since a sync `decide` or
    activity still running in a thread would hold the process open."""
    log = structlog.get_logger(f"weft.{kind}")
    log.info(f"{kind}.loaded", **loaded)
    worker.run(event_loop=event_loop)
    if worker.abandoned:
        log.warning(f"{kind}.exit_abandoned", tasks=worker.abandoned)
        os._exit(1)
    return 0

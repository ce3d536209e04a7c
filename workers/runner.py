"""`weft runner`: an activity-runner process.

It loads the user's modules, collects their `@activity` functions, and runs an
`ActivityWorker` until SIGTERM (finish in-flight work within the grace period,
then exit) or SIGINT.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import structlog

from sdk.activity_worker import ActivityWorker
from sdk.client import AsyncClient
from sdk.retry import RetryPolicy
from workers.loader import LoadError, activities_in, load

log = structlog.get_logger("weft.runner")

# A worker process never gives up on the server: it waits out restarts.
WORKER_RETRY = RetryPolicy(give_up_after=None)


@dataclass(frozen=True)
class RunnerConfig:
    address: str
    namespace: str
    modules: tuple[str, ...]
    task_lists: tuple[str, ...] = ()
    concurrency: int = 16
    identity: str = ""
    grace: timedelta = timedelta(seconds=30)


def worker_client(address: str, namespace: str, identity: str) -> AsyncClient:
    """The client of a worker process: it waits out server restarts, however long."""
    return AsyncClient(address, namespace=namespace, identity=identity or None, retry=WORKER_RETRY)


def build(config: RunnerConfig) -> ActivityWorker:
    """The worker for a config; raises LoadError when there is nothing to run."""
    activities = activities_in(load(list(config.modules)))
    if not activities:
        raise LoadError(f"no @activity functions in {', '.join(config.modules)}")
    lists = config.task_lists or tuple(sorted({a.task_list for a in activities if a.task_list}))
    if not lists:
        raise LoadError("no task list: give --task-list, or name one in @activity(task_list=…)")
    return ActivityWorker(
        worker_client(config.address, config.namespace, config.identity),
        activities=activities,
        task_lists=lists,
        concurrency=config.concurrency,
        grace=config.grace,
    )


def run(config: RunnerConfig) -> int:
    worker = build(config)
    log.info(
        "runner.loaded",
        activities=sorted(worker.activities),
        task_lists=worker.task_lists,
        address=config.address,
    )
    worker.run()
    if worker.abandoned:
        # A sync activity still running in a thread would hold the process open.
        log.warning("runner.exit_abandoned", tasks=worker.abandoned)
        os._exit(1)
    return 0

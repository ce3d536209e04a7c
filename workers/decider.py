"""`weft decider`: a decider process.

It loads the user's modules, creates one instance of each `Decider` subclass it
finds, and runs a `DeciderWorker` until SIGTERM or SIGINT. (The step-workflow
interpreter joins it with the step language.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import structlog

from sdk.decider_worker import DeciderWorker
from workers.loader import LoadError, deciders_in, load
from workers.runner import worker_client

log = structlog.get_logger("weft.decider")


@dataclass(frozen=True)
class DeciderConfig:
    address: str
    namespace: str
    modules: tuple[str, ...]
    task_lists: tuple[str, ...] = ()
    concurrency: int = 8
    identity: str = ""
    grace: timedelta = timedelta(seconds=10)


def build(config: DeciderConfig) -> DeciderWorker:
    deciders = deciders_in(load(list(config.modules)))
    if not deciders:
        raise LoadError(f"no Decider subclasses in {', '.join(config.modules) or '(no modules)'}")
    lists = config.task_lists or tuple(sorted({d.task_list for d in deciders if d.task_list}))
    if not lists:
        raise LoadError("no task list: give --task-list, or set task_list on the Decider")
    return DeciderWorker(
        worker_client(config.address, config.namespace, config.identity),
        deciders=deciders,
        task_lists=lists,
        concurrency=config.concurrency,
        grace=config.grace,
        register_types=True,
    )


def run(config: DeciderConfig) -> int:
    worker = build(config)
    log.info(
        "decider.loaded",
        workflow_types=sorted(f"{n}@{v}" if v else n for n, v in worker.deciders),
        task_lists=worker.task_lists,
        address=config.address,
    )
    worker.run()
    if worker.abandoned:
        # A sync `decide` still running in a thread would hold the process open.
        log.warning("decider.exit_abandoned", tasks=worker.abandoned)
        os._exit(1)
    return 0

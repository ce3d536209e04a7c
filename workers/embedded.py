"""`weft server --embed MODULE`: a decider for the modules' `Decider` classes and
an activity runner for their `@activity` functions, inside the server's process.

They are the same workers `weft decider` and `weft runner` run, with the same
client, only its calls reach the node's services directly
(`orchestrator.api.in_process`) instead of over gRPC. For a small deployment
this is the cheapest shape Weft has: one process, and no hand-off paid twice,
in a client and in a server (bench/README.md, "One process"). What stays the
same: every task is a committed event before and after it runs, so a crash of
the process loses nothing acknowledged, and separate worker processes may
poll the same task lists beside it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field

import structlog

from sdk.client import AsyncClient, default_identity
from sdk.in_process import InProcess
from sdk.worker import Worker
from workers import decider, runner
from workers.loader import LoadError, activities_in, deciders_in, load
from workers.process import WORKER_RETRY

log = structlog.get_logger("weft.embedded")


@dataclass
class EmbeddedWorkers:
    """The workers running beside a node; `stop` drains them."""

    workers: list[Worker]
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        self.tasks = [
            asyncio.create_task(w.run_async(), name=f"embedded-{w.kind}") for w in self.workers
        ]
        for worker in self.workers:
            log.info("embedded.started", kind=worker.kind, task_lists=worker.task_lists)

    def hurry(self) -> None:
        """Cancel the tasks in flight now instead of at the end of the grace period."""
        for worker in self.workers:
            worker.shutdown()  # (a second call skips the grace)

    async def stop(self) -> None:
        """Stop polling, finish the tasks in flight within each worker's grace."""
        for worker in self.workers:
            worker.shutdown()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def build(
    modules: tuple[str, ...],
    services: InProcess,
    namespace: str,
    concurrency: int | None = None,
) -> EmbeddedWorkers:
    """A decider if the modules hold `Decider` classes, a runner if they hold
    `@activity` functions (each running up to `concurrency` tasks at once, or
    its own default); LoadError if they hold neither."""
    loaded = load(list(modules))
    has_deciders, has_activities = bool(deciders_in(loaded)), bool(activities_in(loaded))
    if not has_deciders and not has_activities:
        raise LoadError(f"no Decider subclasses or @activity functions in {', '.join(modules)}")
    workers: list[Worker] = []
    if has_deciders:
        config = decider.DeciderConfig(address="", namespace=namespace, modules=modules)
        if concurrency:
            config = dataclasses.replace(config, concurrency=concurrency)
        workers.append(decider.build(config, _client(services, namespace, "decider")))
    if has_activities:
        conf = runner.RunnerConfig(address="", namespace=namespace, modules=modules)
        if concurrency:
            conf = dataclasses.replace(conf, concurrency=concurrency)
        workers.append(runner.build(conf, _client(services, namespace, "runner")))
    return EmbeddedWorkers(workers)


def _client(services: InProcess, namespace: str, kind: str) -> AsyncClient:
    return AsyncClient(
        "in-process",
        namespace=namespace,
        identity=f"{default_identity()}/{kind}",
        retry=WORKER_RETRY,
        in_process=services,
    )

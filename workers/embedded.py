"""`weft server --embed MODULE`: a decider for the modules' `Decider` classes
(and the step workflows of `--embed-definitions DIR`) and an activity runner for
their `@activity` functions, inside the server's process.

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
from pathlib import Path
from typing import Any

import structlog

from sdk.client import AsyncClient, default_identity
from sdk.in_process import InProcess
from sdk.worker import Worker
from workers import decider, runner
from workers.loader import LoadError, activities_in, deciders_in, load
from workers.process import WORKER_RETRY
from workers.steps.model import Definition

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

    async def ready(self, stop: asyncio.Event) -> None:
        """Until every worker started is ready to poll (its types registered) or
        has ended, or `stop` is set: what the node waits for before it says
        SERVING, so that a client that waits for that finds the types."""
        while not stop.is_set() and not all(
            worker.started or task.done()
            for worker, task in zip(self.workers, self.tasks, strict=True)
        ):
            await asyncio.sleep(0.01)

    def hurry(self) -> None:
        """With `stop`, before or after it: cancel the tasks in flight now instead
        of at the end of the grace period."""
        for worker in self.workers:
            worker.shutdown()  # (a second call skips the grace)

    async def stop(self) -> None:
        """Stop polling, finish the tasks in flight within each worker's grace."""
        for worker in self.workers:
            worker.shutdown()
        ended = await asyncio.gather(*self.tasks, return_exceptions=True)
        # (`ended` is empty when the workers never started)
        for worker, outcome in zip(self.workers, ended, strict=False):
            if isinstance(outcome, BaseException) and not isinstance(
                outcome, asyncio.CancelledError
            ):
                log.error("embedded.failed", kind=worker.kind, error=repr(outcome))

    @property
    def task_lists(self) -> list[str]:
        """Every list the workers poll, each once (a decider's and a runner's may be one)."""
        return list(dict.fromkeys(name for w in self.workers for name in w.task_lists))

    @property
    def abandoned(self) -> int:
        """Tasks still running when the grace ran out (a sync one may never return)."""
        return sum(worker.abandoned for worker in self.workers)


def build(
    modules: tuple[str, ...],
    services: InProcess,
    namespace: str,
    concurrency: int | None = None,
    definitions: tuple[str, ...] = (),
) -> EmbeddedWorkers:
    """A decider if the modules hold `Decider` classes or `definitions` names
    folders of step workflows (which it registers, as `weft decider
    --definitions` does), a runner if the modules hold `@activity` functions,
    each on the task lists they name and running up to `concurrency` tasks at
    once (or its own default); LoadError if there is nothing to run, or no task
    list to run it on."""
    # Once, and each module once: a module given by path runs each time it loads.
    loaded = load(list(dict.fromkeys(modules)))
    deciders, activities = deciders_in(loaded), activities_in(loaded)
    steps = _definitions(_once(definitions))
    if not deciders and not activities and not steps:
        if not modules:
            raise LoadError(f"--embed-definitions: no step workflows in {', '.join(definitions)}")
        where = ", ".join((*modules, *definitions))
        raise LoadError(f"no Decider subclasses, @activity functions or step workflows in {where}")
    workers: list[Worker] = []
    decider_lists = decider.lists_of(deciders, steps)
    if deciders or steps:
        if not decider_lists:
            raise LoadError("no task list: set task_list on the Decider classes")
        with_deciders = modules if deciders else ()  # (modules of activities only: none)
        config = decider.DeciderConfig("", namespace, with_deciders, task_lists=decider_lists)
        if concurrency:
            config = dataclasses.replace(config, concurrency=concurrency)
        client = _client(services, namespace, "decider")
        workers.append(decider.build(config, client, loaded, steps))
    if activities:
        # An activity that names no list is scheduled on its workflow's: the
        # lists the deciders poll.
        unnamed = any(not a.task_list for a in activities)
        named = {a.task_list for a in activities if a.task_list}
        lists = tuple(sorted(named | set(decider_lists if unnamed else ())))
        if not lists:
            raise LoadError(
                "no task list: name one in @activity(task_list=…), or set task_list on a"
                " Decider in the modules"
            )
        conf = runner.RunnerConfig("", namespace, modules, task_lists=lists)
        if concurrency:
            conf = dataclasses.replace(conf, concurrency=concurrency)
        workers.append(runner.build(conf, _client(services, namespace, "runner"), loaded))
    return EmbeddedWorkers(workers)


def _once(folders: tuple[str, ...]) -> tuple[str, ...]:
    """Each folder once, however it is spelled (`flows`, `flows/`, `./flows`)."""
    seen: dict[Path, str] = {}
    for folder in folders:
        seen.setdefault(Path(folder).resolve(), folder)
    return tuple(seen.values())


def _definitions(folders: tuple[str, ...]) -> list[Definition]:
    """The step workflows of `--embed-definitions`; a LoadError that names the option."""
    try:
        return decider.load_definitions(folders, "--embed-definitions")
    except LoadError as exc:
        said = str(exc)
        raise LoadError(said if said.startswith("--") else f"--embed-definitions: {said}") from None


def _client(services: InProcess, namespace: str, kind: str) -> AsyncClient:
    return AsyncClient(
        "in-process",
        namespace=namespace,
        identity=f"{default_identity()}/{kind}",
        retry=WORKER_RETRY,
        in_process=services,
    )


def check(
    modules: tuple[str, ...],
    namespace: str,
    concurrency: int | None = None,
    definitions: tuple[str, ...] = (),
) -> None:
    """Raise what `build` would (LoadError, ValueError), building nothing that
    runs: a supervisor's check before it starts the processes that run them."""
    build(modules, _NOT_RUN, namespace, concurrency, definitions)


class _NotRun:
    """The services of workers that are only checked: never called."""

    @property
    def workflow(self) -> Any:
        raise RuntimeError("workers built by check() do not run")

    admin = workflow


_NOT_RUN = _NotRun()

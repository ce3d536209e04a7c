"""`weft decider`: a decider process.

It loads the user's modules, creates one instance of each `Decider` subclass it
finds, and runs a `DeciderWorker` until SIGTERM or SIGINT. The step-workflow
interpreter is always there too: it decides every run whose `WorkflowStarted`
carries a step definition (registered with `weft register`, or loaded from
`--definitions DIR`, whose types it registers on start).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import ModuleType

from sdk.client import AsyncClient
from sdk.decider import Decider
from sdk.decider_worker import DeciderWorker, TypeRegistration
from sdk.tls import TlsConfig
from workers import process
from workers.loader import LoadError, deciders_in, load
from workers.steps.definition import DefinitionError, load_dir
from workers.steps.interpreter import StepDecider
from workers.steps.limits import DECIDE_CPU_SECONDS, MIN_TIMER
from workers.steps.model import Definition


@dataclass(frozen=True)
class DeciderConfig:
    address: str
    namespace: str
    modules: tuple[str, ...]
    task_lists: tuple[str, ...] = ()
    definitions: tuple[str, ...] = ()
    concurrency: int = 8
    identity: str = ""
    grace: timedelta = timedelta(seconds=10)
    min_timer: timedelta = MIN_TIMER
    """Step timers shorter than this are rounded up (`workers.steps.limits`)."""
    cpu_budget: float = DECIDE_CPU_SECONDS
    """CPU seconds one step-workflow decision task may use; 0 for no budget."""
    tls: TlsConfig | None = None
    api_key: str | None = None
    event_loop: str | None = None
    """"auto", "uvloop" or "asyncio" (None: `WEFT_EVENT_LOOP`, else "asyncio";
    `weft runner` and `weft decider` pass their `--event-loop`, "asyncio" by default)."""


def build(
    config: DeciderConfig,
    client: AsyncClient | None = None,
    loaded: list[ModuleType] | None = None,
    steps: list[Definition] | None = None,
) -> DeciderWorker:
    """The worker for a config (`loaded`: its modules, already imported by the
    caller; `steps`: its definitions, already read); raises LoadError when a
    module holds no decider or there is no task list to poll."""
    modules = loaded if loaded is not None else load(list(config.modules))
    deciders = deciders_in(modules) if config.modules else []
    if config.modules and not deciders:
        raise LoadError(f"no Decider subclasses in {', '.join(config.modules)}")
    if steps is None:
        steps = load_definitions(config.definitions)
    lists = config.task_lists or lists_of(deciders, steps)
    if not lists:
        raise LoadError(
            "no task list: give --task-list, --definitions, or set task_list on the Decider"
        )
    return DeciderWorker(
        client
        if client is not None
        else process.worker_client(
            config.address, config.namespace, config.identity, config.tls, config.api_key
        ),
        deciders=deciders,
        task_lists=lists,
        concurrency=config.concurrency,
        grace=config.grace,
        register_types=True,
        fallback=StepDecider(steps, min_timer=config.min_timer, cpu_budget=config.cpu_budget),
        registrations=[registration(d, lists) for d in steps],
    )


def lists_of(deciders: list[Decider], steps: list[Definition]) -> tuple[str, ...]:
    """The task lists the Decider classes and step workflows name, sorted."""
    return tuple(
        sorted({d.task_list for d in deciders if d.task_list} | {d.task_list for d in steps})
    )


def load_definitions(
    directories: tuple[str, ...], option: str = "--definitions"
) -> list[Definition]:
    """The step workflows of the folders (`option` names them in an error)."""
    found: list[Definition] = []
    for directory in directories:
        path = Path(directory)
        if not path.is_dir():
            raise LoadError(f"{option} {directory}: not a directory")
        try:
            found.extend(load_dir(path))
        except DefinitionError as exc:
            raise LoadError(str(exc)) from None
    seen: set[tuple[str, str]] = set()
    for item in found:
        if (item.name, item.version) in seen:
            raise LoadError(f"{item.path}: {item.name} version {item.version} is defined twice")
        seen.add((item.name, item.version))
    return found


def registration(definition: Definition, lists: tuple[str, ...]) -> TypeRegistration:
    """A definition's type, registered with the task list this process polls
    for it, so `weft start TYPE` reaches it."""
    task_list = definition.task_list if definition.task_list in lists else lists[0]
    return TypeRegistration(
        name=definition.name,
        version=definition.version,
        task_list=task_list,
        execution_timeout=definition.execution_timeout,
        decider_timeout=definition.decider_timeout,
        description=definition.description,
        definition=definition.source,
    )


def run(config: DeciderConfig) -> int:
    worker = build(config)
    return process.run(
        "decider",
        worker,
        config.event_loop,
        workflow_types=sorted(f"{n}@{v}" if v else n for n, v in worker.deciders),
        task_lists=worker.task_lists,
        address=config.address,
    )

"""`weft runner`: an activity-runner process.

It loads the user's modules, collects their `@activity` functions, adds the
built-in ones (`weft.http` within `--allow-http`, `weft.shell` with
`--allow-shell`; without its flag each refuses its tasks: see
`workers.builtins`), and runs an `ActivityWorker` until SIGTERM (finish
in-flight work within the grace period, then exit) or SIGINT. With no modules
it runs the built-ins alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType

from sdk.activity import ActivityDefinition
from sdk.activity_worker import ActivityWorker
from sdk.client import AsyncClient
from sdk.tls import TlsConfig
from workers import builtins, process
from workers.loader import LoadError, activities_in, load


@dataclass(frozen=True)
class RunnerConfig:
    address: str
    namespace: str
    modules: tuple[str, ...] = ()
    task_lists: tuple[str, ...] = ()
    concurrency: int = 16
    identity: str = ""
    grace: timedelta = timedelta(seconds=30)
    allow_shell: bool = False
    """Run `weft.shell` tasks (shell commands with the runner's rights); without
    it they fail at once with `ShellNotAllowed`."""
    allow_http: builtins.HttpPolicy = builtins.HTTP_OFF
    """The hosts `weft.http` tasks may reach; with none they fail at once with
    `HttpNotAllowed`."""
    tls: TlsConfig | None = None
    api_key: str | None = None
    event_loop: str | None = None
    """"auto", "uvloop" or "asyncio" (None: `WEFT_EVENT_LOOP`, else "asyncio";
    `weft runner` and `weft decider` pass their `--event-loop`, "asyncio" by default)."""


def build(
    config: RunnerConfig,
    client: AsyncClient | None = None,
    loaded: list[ModuleType] | None = None,
) -> ActivityWorker:
    """The worker for a config (`loaded`: its modules, already imported by the
    caller); raises LoadError when a module holds nothing to run or there is no
    task list to poll."""
    user = activities_in(loaded if loaded is not None else load(list(config.modules)))
    if config.modules and not user:
        raise LoadError(f"no @activity functions in {', '.join(config.modules)}")
    lists = config.task_lists or tuple(sorted({a.task_list for a in user if a.task_list}))
    if not lists:
        raise LoadError("no task list: give --task-list, or name one in @activity(task_list=…)")
    return ActivityWorker(
        client
        if client is not None
        else process.worker_client(
            config.address, config.namespace, config.identity, config.tls, config.api_key
        ),
        activities=with_builtins(
            user, allow_shell=config.allow_shell, allow_http=config.allow_http
        ),
        task_lists=lists,
        concurrency=config.concurrency,
        grace=config.grace,
    )


def with_builtins(
    user: list[ActivityDefinition],
    *,
    allow_shell: bool,
    allow_http: builtins.HttpPolicy = builtins.HTTP_OFF,
) -> list[ActivityDefinition]:
    """The user's activities and the built-ins. A built-in a user module merely
    imports is the runner's own; a user activity under a built-in's name is
    refused, since the step language's `http`/`shell` steps schedule that name."""
    offered = builtins.builtins(allow_shell=allow_shell, allow_http=allow_http)
    reserved = {b.name for b in offered}
    own = [a for a in user if a not in (builtins.http, builtins.shell)]
    for defn in own:
        if defn.name in reserved:
            raise LoadError(f"{defn.name!r} is a built-in activity: give yours another name")
    return [*own, *offered]


def run(config: RunnerConfig) -> int:
    worker = build(config)
    return process.run(
        "runner",
        worker,
        config.event_loop,
        activities=sorted(worker.activities),
        task_lists=worker.task_lists,
        address=config.address,
        allow_shell=config.allow_shell,
        allow_http=config.allow_http.describe(),
    )

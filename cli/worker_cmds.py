"""`weft runner` and `weft decider`: the worker processes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from cli.errors import EXIT_USAGE, exit_code, fail
from cli.gc_settings import tune_collector
from cli.params import (
    DURATION,
    LOG_LEVEL,
    client_api_key,
    client_tls,
    event_loop_factory,
    event_loop_option,
    server_options,
)

F = TypeVar("F", bound=Callable[..., Any])


def worker_options(what: str, concurrency: int, grace: str) -> Callable[[F], F]:
    """The options `weft runner` and `weft decider` share, with their own defaults."""

    def apply(fn: F) -> F:
        for option in reversed(
            (
                click.argument("modules", nargs=-1),
                click.option(
                    "--task-list", "task_lists", multiple=True, help="poll this task list"
                ),
                click.option(
                    "--concurrency",
                    type=click.IntRange(1, 10_000),
                    default=concurrency,
                    show_default=True,
                ),
                click.option(
                    "--identity", default="", help=f"how this {what} appears in histories"
                ),
                click.option(
                    "--grace",
                    type=DURATION,
                    default=grace,
                    show_default=True,
                    help="time to finish on SIGTERM",
                ),
                click.option(
                    "--log-level",
                    envvar="WEFT_LOG_LEVEL",
                    type=LOG_LEVEL,
                    default="info",
                    show_default=True,
                ),
                event_loop_option("asyncio"),
                server_options,
            )
        ):
            fn = option(fn)
        return fn

    return apply


@click.command()
@worker_options("runner", concurrency=16, grace="30s")
@click.option(
    "--allow-shell",
    is_flag=True,
    help="run `weft.shell` tasks (shell commands, with this process's rights);"
    " values in a step's command reach it as arguments, never as shell code",
)
@click.option(
    "--allow-http",
    "allow_http",
    multiple=True,
    metavar="HOST",
    callback=lambda ctx, param, value: _http_policy(value),
    help="let `weft.http` tasks reach HOST (a name or address; repeatable, or"
    " comma-separated; `*` for any host with only public addresses). Private,"
    " loopback and link-local addresses only if listed; redirects are checked too."
    " Without it, weft.http tasks fail at once",
)
def runner(log_level: str, **options: Any) -> None:
    """Run the @activity functions found in MODULES (e.g. examples.order), and
    the built-ins: weft.http with --allow-http HOST, weft.shell with
    --allow-shell (each refuses its tasks without its flag)."""
    from orchestrator import logging as weft_logging
    from workers import runner as process

    event_loop_factory(options["event_loop"])  # (refused before anything loads)
    weft_logging.configure(log_level)
    config = process.RunnerConfig(**options, tls=client_tls(), api_key=client_api_key())
    _run("runner", lambda: process.run(config))


@click.command()
@worker_options("decider", concurrency=8, grace="10s")
@click.option(
    "--definitions",
    multiple=True,
    metavar="DIR",
    help="load and register the step workflows (*.yaml) of this folder; repeatable",
)
def decider(log_level: str, **options: Any) -> None:
    """Run the step interpreter, for the step workflows registered with `weft
    register` or loaded from --definitions folders, and the Decider classes
    found in MODULES (e.g. examples.order)."""
    from orchestrator import logging as weft_logging
    from workers import decider as process

    if not options["modules"] and not options["definitions"] and not options["task_lists"]:
        # Nothing names a task list to poll.
        raise click.UsageError(
            "nothing to decide: give --task-list TL (step workflows registered with"
            " `weft register`), --definitions DIR, or MODULES (Decider classes)"
        )

    event_loop_factory(options["event_loop"])  # (refused before anything loads)
    weft_logging.configure(log_level)
    config = process.DeciderConfig(**options, tls=client_tls(), api_key=client_api_key())
    _run("decider", lambda: process.run(config))


def _http_policy(value: tuple[str, ...]) -> Any:
    """`--allow-http` values as the runner's policy; a bad host is a usage error."""
    from workers.builtins import HttpPolicy

    try:
        return HttpPolicy.of(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _run(command: str, start: Callable[[], int]) -> None:
    """Run a worker process; what stops it from starting is one line and an exit code."""
    from sdk.errors import WeftError
    from workers.loader import LoadError

    tune_collector()
    try:
        code = start()
    except (LoadError, ValueError, TypeError) as exc:  # modules, or what they define
        if (click.get_current_context().find_root().obj or {}).get("debug"):
            raise
        fail(command, str(exc), EXIT_USAGE)
    except WeftError as exc:
        if (click.get_current_context().find_root().obj or {}).get("debug"):
            raise
        fail(command, exc.message, exit_code(exc))
    sys.exit(code)


COMMANDS = (runner, decider)

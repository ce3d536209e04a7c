"""`weft runner` and `weft decider`: the worker processes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from orchestrator.cli.errors import EXIT_USAGE, exit_code, fail
from orchestrator.cli.params import DURATION, server_options

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
                    "--log-level", envvar="WEFT_LOG_LEVEL", default="info", show_default=True
                ),
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
    help="run `weft.shell` tasks (shell commands, with this process's rights)",
)
def runner(log_level: str, **options: Any) -> None:
    """Run the @activity functions found in MODULES (e.g. examples.order), and
    the built-in weft.http (and weft.shell with --allow-shell)."""
    from orchestrator import logging as weft_logging
    from workers import runner as process

    weft_logging.configure(log_level)
    config = process.RunnerConfig(**options)
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

    weft_logging.configure(log_level)
    config = process.DeciderConfig(**options)
    _run("decider", lambda: process.run(config))


def _run(command: str, start: Callable[[], int]) -> None:
    """Run a worker process; what stops it from starting is one line and an exit code."""
    from sdk.errors import WeftError
    from workers.loader import LoadError

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

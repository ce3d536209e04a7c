"""`weft runner` and `weft decider`: the worker processes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta

import click

from orchestrator.cli.errors import EXIT_USAGE, exit_code, fail
from orchestrator.cli.params import DURATION, server_options


@click.command()
@click.argument("modules", nargs=-1, required=True)
@click.option("--task-list", "task_lists", multiple=True, help="poll this task list (repeatable)")
@click.option("--concurrency", type=click.IntRange(1, 10_000), default=16, show_default=True)
@click.option("--identity", default="", help="how this runner appears in histories")
@click.option(
    "--grace", type=DURATION, default="30s", show_default=True, help="time to finish on SIGTERM"
)
@click.option("--log-level", envvar="WEFT_LOG_LEVEL", default="info", show_default=True)
@server_options
def runner(
    modules: tuple[str, ...],
    task_lists: tuple[str, ...],
    concurrency: int,
    identity: str,
    grace: timedelta,
    log_level: str,
    address: str,
    namespace: str,
) -> None:
    """Run the @activity functions found in MODULES (e.g. examples.order)."""
    from orchestrator import logging as weft_logging
    from workers import runner as process

    weft_logging.configure(log_level)
    config = process.RunnerConfig(
        address=address,
        namespace=namespace,
        modules=modules,
        task_lists=task_lists,
        concurrency=concurrency,
        identity=identity,
        grace=grace,
    )
    _run("runner", lambda: process.run(config))


@click.command()
@click.argument("modules", nargs=-1, required=True)
@click.option("--task-list", "task_lists", multiple=True, help="poll this task list (repeatable)")
@click.option("--concurrency", type=click.IntRange(1, 10_000), default=8, show_default=True)
@click.option("--identity", default="", help="how this decider appears in histories")
@click.option(
    "--grace", type=DURATION, default="10s", show_default=True, help="time to finish on SIGTERM"
)
@click.option("--log-level", envvar="WEFT_LOG_LEVEL", default="info", show_default=True)
@server_options
def decider(
    modules: tuple[str, ...],
    task_lists: tuple[str, ...],
    concurrency: int,
    identity: str,
    grace: timedelta,
    log_level: str,
    address: str,
    namespace: str,
) -> None:
    """Run the Decider classes found in MODULES (e.g. examples.order)."""
    from orchestrator import logging as weft_logging
    from workers import decider as process

    weft_logging.configure(log_level)
    config = process.DeciderConfig(
        address=address,
        namespace=namespace,
        modules=modules,
        task_lists=task_lists,
        concurrency=concurrency,
        identity=identity,
        grace=grace,
    )
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

"""`weft server`: run an orchestrator node."""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import timedelta

import click

from orchestrator.cli.params import DURATION
from orchestrator.config import DEFAULT_DB, DEFAULT_LISTEN, ServerConfig


@click.command()
@click.option(
    "--db",
    "db_url",
    envvar="WEFT_DATABASE_URL",
    default=DEFAULT_DB,
    show_default=True,
    help="sqlite:///PATH or postgresql://USER@HOST/DB",
)
@click.option(
    "--listen",
    envvar="WEFT_LISTEN",
    default=DEFAULT_LISTEN,
    show_default=True,
    help="HOST:PORT to serve gRPC on",
)
@click.option(
    "--metrics-listen",
    envvar="WEFT_METRICS_LISTEN",
    default="",
    help="HOST:PORT to serve Prometheus metrics on (off unless given)",
)
@click.option(
    "--long-poll",
    envvar="WEFT_LONG_POLL",
    type=DURATION,
    default="60s",
    show_default=True,
    help="how long a poll waits before an empty answer",
)
@click.option(
    "--max-polls-per-client",
    envvar="WEFT_MAX_POLLS_PER_CLIENT",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="long polls one client host may have waiting at once (more: RESOURCE_EXHAUSTED)",
)
@click.option(
    "--purge-interval",
    envvar="WEFT_PURGE_INTERVAL",
    type=DURATION,
    default="60s",
    show_default=True,
    help="how often closed runs past their retention are deleted (0s: never)",
)
@click.option("--log-level", envvar="WEFT_LOG_LEVEL", default="info", show_default=True)
def server(
    db_url: str,
    listen: str,
    metrics_listen: str,
    long_poll: timedelta,
    max_polls_per_client: int,
    purge_interval: timedelta,
    log_level: str,
) -> None:
    """Run an orchestrator node."""
    from orchestrator import logging as weft_logging
    from orchestrator.server import Server

    weft_logging.configure(log_level)
    config = ServerConfig(
        db_url=db_url,
        listen=listen,
        metrics_listen=metrics_listen,
        long_poll=long_poll.total_seconds(),
        max_polls_per_client=max_polls_per_client,
        purge_interval=purge_interval.total_seconds(),
    )
    try:
        asyncio.run(_serve(Server(config)))
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        message = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        click.echo(f"weft server: {message[0] if message else type(exc).__name__}", err=True)
        sys.exit(1)


async def _serve(node: object) -> None:
    from orchestrator.server import Server

    assert isinstance(node, Server)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await node.start()
    await stop.wait()
    await node.stop()

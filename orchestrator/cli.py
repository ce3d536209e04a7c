"""The `weft` command line. This issue brings `weft server`; the client and
worker commands join it with the SDK issue."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta

import click

from orchestrator.config import DEFAULT_DB, DEFAULT_LISTEN, ServerConfig
from sdk.durations import parse_duration


class DurationType(click.ParamType):  # type: ignore[type-arg]
    name = "duration"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = DurationType()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Weft: event-sourced workflow orchestration."""


@main.command()
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
@click.option("--log-level", envvar="WEFT_LOG_LEVEL", default="info", show_default=True)
def server(
    db_url: str, listen: str, metrics_listen: str, long_poll: timedelta, log_level: str
) -> None:
    """Run an orchestrator node."""
    # gRPC's C core logs its own copy of errors we already report in one line.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    from orchestrator import logging as weft_logging
    from orchestrator.server import Server

    weft_logging.configure(log_level)
    config = ServerConfig(
        db_url=db_url,
        listen=listen,
        metrics_listen=metrics_listen,
        long_poll=long_poll.total_seconds(),
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


if __name__ == "__main__":
    main()

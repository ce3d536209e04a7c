"""`weft server`: run an orchestrator node."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cli import server_signals
from cli.gc_settings import tune_collector
from cli.params import (
    ADDRESS,
    DURATION,
    LOG_LEVEL,
    SizeType,
    event_loop_factory,
    event_loop_option,
)
from cli.server_tls import tls_settings
from orchestrator.config import (
    DEFAULT_DB,
    DEFAULT_LISTEN,
    FOLDED_POLL,
    LONG_POLL_MAX,
    LONG_POLL_MIN,
    ServerConfig,
)
from orchestrator.engine.limits import SETTABLE, Limits
from sdk.client import POLL_TIMEOUT

if TYPE_CHECKING:
    from orchestrator.server import Server
    from workers.embedded import EmbeddedWorkers


F = TypeVar("F", bound=Callable[..., Any])


def _limit_option(flag: str, limit: str, text: str) -> Callable[[F], F]:
    """A `--max-…` option (and its WEFT_MAX_… variable) for the per-run limit
    `limit`, a field of `Limits`: its default there, its range in `SETTABLE`."""
    return click.option(
        flag,
        envvar="WEFT_" + flag.removeprefix("--").upper().replace("-", "_"),
        type=click.IntRange(*SETTABLE[limit]),
        default=getattr(Limits, limit),
        show_default=True,
        help=text,
    )


@click.command()
@click.option(
    "--db",
    "db_url",
    envvar="WEFT_DATABASE_URL",
    default=DEFAULT_DB,
    show_default=True,
    help="sqlite:///PATH or postgresql://USER@HOST/DB (a password belongs in"
    " WEFT_DATABASE_URL: on the command line, `ps` shows it)",
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
    callback=lambda ctx, param, value: value and ADDRESS.convert(value, param, ctx),
    help="HOST:PORT to serve Prometheus metrics on (off unless given)",
)
@click.option(
    "--long-poll",
    envvar="WEFT_LONG_POLL",
    type=DURATION,
    default="60s",
    show_default=True,
    help=f"how long a poll waits before an empty answer ({LONG_POLL_MIN:g}s to {LONG_POLL_MAX:g}s)",
)
@click.option(
    "--folded-poll",
    envvar="WEFT_FOLDED_POLL",
    type=DURATION,
    default=f"{FOLDED_POLL:g}s",
    show_default=True,
    help="how long a poll folded into a worker's answer waits before an empty answer, the"
    " long poll if shorter (the worker learns its answer was written when that call"
    " returns; 0s: it does not wait)",
)
@click.option(
    "--direct-lanes/--no-direct-lanes",
    envvar="WEFT_DIRECT_LANES",
    default=True,
    show_default=True,
    help="let workers on this machine send their task calls on bare loopback connections"
    " instead of gRPC streams (offered only on a loopback --listen without TLS or --auth;"
    " README 'Direct lanes')",
)
@event_loop_option("auto")
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
@click.option(
    "--diagnose-interval",
    envvar="WEFT_DIAGNOSE_INTERVAL",
    type=DURATION,
    default="60s",
    show_default=True,
    help="how often stuck runs are counted for the weft_stuck_findings metric (0s: never)",
)
@click.option(
    "--workers",
    envvar="WEFT_WORKERS",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="server processes on this port (PostgreSQL only): one core each",
)
@click.option("--reuse-port", is_flag=True, hidden=True, help="a worker of --workers")
@click.option(
    "--tls-cert",
    envvar="WEFT_TLS_CERT",
    type=click.Path(exists=True, dir_okay=False),
    help="PEM certificate chain: serve gRPC and metrics over TLS (reloaded on change or SIGHUP)",
)
@click.option(
    "--tls-key",
    envvar="WEFT_TLS_KEY",
    type=click.Path(exists=True, dir_okay=False),
    help="PEM private key of --tls-cert",
)
@click.option(
    "--tls-client-ca",
    envvar="WEFT_TLS_CLIENT_CA",
    type=click.Path(exists=True, dir_okay=False),
    help="PEM CA certificate(s): require client certificates issued by them (mutual TLS)",
)
@click.option(
    "--insecure",
    is_flag=True,
    envvar="WEFT_INSECURE",
    help="serve plaintext on a non-loopback address (refused without this flag)",
)
@click.option(
    "--auth",
    is_flag=True,
    envvar="WEFT_AUTH",
    help="require an API key or a certificate principal on every call (README 'Security')",
)
@click.option(
    "--max-polls-per-principal",
    envvar="WEFT_MAX_POLLS_PER_PRINCIPAL",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="with --auth: long polls one principal may have waiting at once (more: "
    "RESOURCE_EXHAUSTED)",
)
@click.option(
    "--max-requests-per-principal",
    envvar="WEFT_MAX_REQUESTS_PER_PRINCIPAL",
    type=click.FloatRange(min=0),
    default=5000.0,
    show_default=True,
    help="with --auth: requests per second one principal may make (0: no limit)",
)
@click.option(
    "--max-payload-size",
    "max_payload_size",
    envvar="WEFT_MAX_PAYLOAD_SIZE",
    type=SizeType(*SETTABLE["payload_bytes"]),
    default="256KiB",
    show_default=True,
    help="largest input, result, details or signal payload (64KiB to 2MiB)",
)
@_limit_option(
    "--max-history-events",
    "events_per_run",
    "events per run; past it only closing decisions are taken (continue as new)",
)
@_limit_option(
    "--max-pending-activities",
    "pending_activities",
    "activities one run may have scheduled or running at once",
)
@_limit_option("--max-pending-timers", "pending_timers", "timers one run may have started at once")
@_limit_option("--max-signals-per-run", "signals_per_run", "signals one run may receive")
@click.option(
    "--node-name",
    envvar="WEFT_NODE_NAME",
    default="",
    help="this node's stable name in `weft nodes` (default: HOST:PORT)",
)
@click.option(
    "--lease-period",
    envvar="WEFT_LEASE_PERIOD",
    type=DURATION,
    default="10s",
    show_default=True,
    help="the upkeep leader's lease: a dead leader is replaced within two",
)
@click.option(
    "--worker-session-timeout",
    envvar="WEFT_WORKER_SESSION_TIMEOUT",
    type=DURATION,
    default="10s",
    show_default=True,
    help="a worker silent this long is lost: its started tasks time out (WORKER_LOST)",
)
@click.option(
    "--embed",
    "embed",
    envvar="WEFT_EMBED",
    multiple=True,
    metavar="MODULE",
    help="run a decider and an activity runner for MODULE's Decider classes and @activity"
    " functions inside this process, calling the node without gRPC (repeatable; the"
    " default namespace)",
)
@click.option(
    "--embed-definitions",
    "embed_definitions",
    envvar="WEFT_EMBED_DEFINITIONS",
    multiple=True,
    metavar="DIR",
    help="run the step workflows (*.yaml) of DIR on the embedded decider, registering"
    " them as weft decider --definitions does (repeatable; with or without --embed)",
)
@click.option(
    "--embed-concurrency",
    envvar="WEFT_EMBED_CONCURRENCY",
    type=click.IntRange(min=1),
    default=None,
    help="with --embed or --embed-definitions: tasks each embedded worker runs at once"
    " (default: weft decider's"
    " and weft runner's own)",
)
@click.option(
    "--log-level", envvar="WEFT_LOG_LEVEL", type=LOG_LEVEL, default="info", show_default=True
)
def server(
    db_url: str,
    listen: str,
    metrics_listen: str,
    long_poll: timedelta,
    folded_poll: timedelta,
    direct_lanes: bool,
    event_loop: str,
    max_polls_per_client: int,
    purge_interval: timedelta,
    diagnose_interval: timedelta,
    workers: int,
    reuse_port: bool,
    log_level: str,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    insecure: bool,
    auth: bool,
    max_polls_per_principal: int,
    max_requests_per_principal: float,
    max_payload_size: int,
    max_history_events: int,
    max_pending_activities: int,
    max_pending_timers: int,
    max_signals_per_run: int,
    node_name: str,
    lease_period: timedelta,
    worker_session_timeout: timedelta,
    embed: tuple[str, ...],
    embed_definitions: tuple[str, ...],
    embed_concurrency: int | None,
) -> None:
    """Run an orchestrator node."""
    from orchestrator import logging as weft_logging
    from orchestrator.server import Server

    weft_logging.configure(log_level)
    if lease_period.total_seconds() < 1 or worker_session_timeout.total_seconds() < 2:
        click.echo(
            "weft server: --lease-period must be at least 1s"
            " and --worker-session-timeout at least 2s",
            err=True,
        )
        sys.exit(2)
    if not LONG_POLL_MIN <= long_poll.total_seconds() <= LONG_POLL_MAX:
        click.echo(
            f"weft server: --long-poll must be from {LONG_POLL_MIN:g}s to {LONG_POLL_MAX:g}s"
            f" (workers give up on a poll after {POLL_TIMEOUT.total_seconds():g}s)",
            err=True,
        )
        sys.exit(2)
    embedding = bool(embed or embed_definitions)
    if embedding and event_loop == "auto":
        event_loop = "asyncio"  # (the user's activities run here: sdk/event_loops.py)
    loop = event_loop_factory(event_loop)
    _warn_of_a_visible_password(db_url)
    tls = tls_settings(listen, metrics_listen, tls_cert, tls_key, tls_client_ca, insecure, auth)
    if embed_concurrency and not embedding:
        click.echo(
            "weft server: --embed-concurrency needs --embed or --embed-definitions", err=True
        )
        sys.exit(2)
    if workers > 1 and not reuse_port:  # (a worker of a supervisor never supervises)
        if not db_url.startswith("postgresql"):
            click.echo("weft server: --workers needs PostgreSQL (SQLite is one node)", err=True)
            sys.exit(2)
        from cli.supervisor import supervise, worker_metrics_listen

        try:  # (the last worker's port: the others' are below it)
            worker_metrics_listen(metrics_listen, workers - 1)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--metrics-listen'") from None
        settings = {
            "WEFT_DATABASE_URL": db_url,
            "WEFT_LISTEN": listen,
            "WEFT_METRICS_LISTEN": metrics_listen,
            "WEFT_LONG_POLL": f"{long_poll.total_seconds()}s",
            "WEFT_FOLDED_POLL": f"{folded_poll.total_seconds()}s",
            "WEFT_DIRECT_LANES": "1" if direct_lanes else "0",
            "WEFT_EVENT_LOOP": event_loop,
            "WEFT_MAX_POLLS_PER_CLIENT": str(max_polls_per_client),
            "WEFT_PURGE_INTERVAL": f"{purge_interval.total_seconds()}s",
            "WEFT_DIAGNOSE_INTERVAL": f"{diagnose_interval.total_seconds()}s",
            "WEFT_LOG_LEVEL": log_level,
            "WEFT_MAX_POLLS_PER_PRINCIPAL": str(max_polls_per_principal),
            "WEFT_MAX_REQUESTS_PER_PRINCIPAL": str(max_requests_per_principal),
            "WEFT_MAX_PAYLOAD_SIZE": str(max_payload_size),
            "WEFT_MAX_HISTORY_EVENTS": str(max_history_events),
            "WEFT_MAX_PENDING_ACTIVITIES": str(max_pending_activities),
            "WEFT_MAX_PENDING_TIMERS": str(max_pending_timers),
            "WEFT_MAX_SIGNALS_PER_RUN": str(max_signals_per_run),
            "WEFT_NODE_NAME": node_name,
            "WEFT_LEASE_PERIOD": f"{lease_period.total_seconds()}s",
            "WEFT_WORKER_SESSION_TIMEOUT": f"{worker_session_timeout.total_seconds()}s",
            **({"WEFT_EMBED": " ".join(embed)} if embed else {}),
            **(
                {"WEFT_EMBED_DEFINITIONS": " ".join(embed_definitions)} if embed_definitions else {}
            ),
            **({"WEFT_EMBED_CONCURRENCY": str(embed_concurrency)} if embed_concurrency else {}),
            **tls,
        }
        if embedding:  # here, once: a process that cannot load them would be restarted forever
            _check_embedded(embed, embed_definitions, embed_concurrency)
        sys.exit(supervise(settings, workers))
    config = ServerConfig(
        db_url=db_url,
        listen=listen,
        metrics_listen=metrics_listen,
        long_poll=long_poll.total_seconds(),
        folded_poll=folded_poll.total_seconds(),
        direct_lanes=direct_lanes,
        max_polls_per_client=max_polls_per_client,
        purge_interval=purge_interval.total_seconds(),
        diagnose_interval=diagnose_interval.total_seconds(),
        reuse_port=reuse_port,
        port_processes=workers if reuse_port else 1,
        tls_cert=tls_cert or "",
        tls_key=tls_key or "",
        tls_client_ca=tls_client_ca or "",
        insecure=insecure,
        auth=auth,
        max_polls_per_principal=max_polls_per_principal,
        max_requests_per_principal=max_requests_per_principal,
        limits=dataclasses.replace(
            Limits(),
            payload_bytes=max_payload_size,
            events_per_run=max_history_events,
            pending_activities=max_pending_activities,
            pending_timers=max_pending_timers,
            signals_per_run=max_signals_per_run,
        ),
        node_name=node_name,
        lease_period=lease_period.total_seconds(),
        worker_session_timeout=worker_session_timeout.total_seconds(),
    )
    node = Server(config)
    embedded = (
        _embedded(node, embed, embed_definitions, embed_concurrency, auth) if embedding else None
    )
    code = 0
    try:
        # A process of `--workers N` shares the supervisor's signals (and a
        # terminal's, and a service manager's): a repeat is not a hurry there.
        with asyncio.Runner(loop_factory=loop) as runner:
            runner.run(_serve(node, embedded, hurry_on_repeat=not reuse_port, keep_signals=True))
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        message = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        click.echo(f"weft server: {message[0] if message else type(exc).__name__}", err=True)
        code = 1
    finally:  # exiting: a signal more must not replace the exit's status with its own
        for sig in server_signals.STOPS:  # (ignored: Python's own handlers end before it)
            signal.signal(sig, signal.SIG_IGN)
    if embedded is not None and embedded.abandoned:
        # As `weft runner` does: a sync task still running in a thread would
        # hold the interpreter open at exit.
        click.echo(
            f"weft server: {embedded.abandoned} embedded task(s) abandoned at the stop",
            err=True,
        )
        os._exit(1)
    sys.exit(code)


def _warn_of_a_visible_password(db_url: str) -> None:
    """One line on stderr when `--db` itself carries a password: every user of
    the machine can read a process's arguments (`ps`), not its environment."""
    source = click.get_current_context().get_parameter_source("db_url")
    if source is not click.core.ParameterSource.COMMANDLINE:
        return
    parts = urllib.parse.urlsplit(db_url)
    query = urllib.parse.parse_qs(parts.query)
    if parts.password or "password" in query:
        click.echo(
            "weft server: warning: the --db URL holds a password, which `ps` shows to"
            " every user of this machine; set WEFT_DATABASE_URL instead",
            err=True,
        )


def _embedded(
    node: Server,
    modules: tuple[str, ...],
    definitions: tuple[str, ...],
    concurrency: int | None,
    auth: bool,
) -> EmbeddedWorkers:
    """The workers of `--embed`, built before the node opens anything; under
    `--auth`, their calls are a worker's of the lists they poll."""
    from orchestrator.api.validate import DEFAULT_NAMESPACE
    from orchestrator.auth.gate import embedded_workers
    from workers import embedded

    services = node.in_process()
    with _refused_as_usage():
        workers = embedded.build(modules, services, DEFAULT_NAMESPACE, concurrency, definitions)
    if auth:
        services.admit_as(embedded_workers(DEFAULT_NAMESPACE, workers.task_lists))
    return workers


def _check_embedded(
    modules: tuple[str, ...], definitions: tuple[str, ...], concurrency: int | None
) -> None:
    """`_embedded`'s refusals, for a supervisor, whose processes get the modules
    in WEFT_EMBED and the folders in WEFT_EMBED_DEFINITIONS: split on
    whitespace, so a name may hold none."""
    from orchestrator.api.validate import DEFAULT_NAMESPACE
    from workers import embedded
    from workers.loader import LoadError

    with _refused_as_usage():
        spaced = [m for m in (*modules, *definitions) if len(m.split()) != 1]
        if spaced:
            raise LoadError(
                f"{spaced[0]!r}: with --workers, a module or folder may not hold spaces"
            )
        embedded.check(modules, DEFAULT_NAMESPACE, concurrency, definitions)


@contextlib.contextmanager
def _refused_as_usage() -> Iterator[None]:
    """Modules or definitions that do not load, or hold nothing to run: one line
    and exit 2."""
    from workers.loader import LoadError

    try:
        yield
    except (LoadError, ValueError, TypeError) as exc:  # modules, or what they define
        said = str(exc)
        option = "" if said.startswith("--") else "--embed: "  # (unless it names its own)
        click.echo(f"weft server: {option}{said}", err=True)
        sys.exit(2)


async def _serve(
    node: Server,
    embedded: EmbeddedWorkers | None = None,
    hurry_on_repeat: bool = True,
    keep_signals: bool = False,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        stop.set()
        if embedded is None or not hurry_on_repeat:
            return
        if signals == 2:
            embedded.hurry()  # no grace for the tasks in flight
        elif signals > 2:
            os._exit(128 + signum)  # a sync task past its grace that never returns

    async def start_embedded() -> bool:
        # Before the node says SERVING: a client that waits for that finds the
        # embedded deciders' types registered (`weft start TYPE` needs no list).
        # It does not say it once stopping, or with a worker already ended.
        if embedded is not None and not stop.is_set():
            embedded.start()
            await embedded.ready(stop)
            return not stop.is_set() and not any(task.done() for task in embedded.tasks)
        return not stop.is_set()

    reload = node.reload_tls if node.config.tls_cert else None  # (a no-op until read)
    finish, restore = server_signals.install(loop, on_signal, reload)
    # One of the node's own loops ending is a fault: the process stops as for a
    # signal (from the start on: its workers are then not said SERVING), then
    # exits 1 saying which loop (a supervisor restarts it whole).
    fault = asyncio.ensure_future(node.wait_for_fault())
    fault.add_done_callback(lambda _: stop.set())
    try:
        await node.start(before_serving=start_embedded)
        tune_collector()
        await _serve_until_stopped(node, embedded, stop)
    finally:
        fault.cancel()
        # Served: a signal more changes nothing (the process's whole life keeps
        # the handlers, inert; `server` then ignores the signals until it exits).
        (finish if keep_signals else restore)()
    if node.fault is not None:
        raise RuntimeError(f"the node stopped: {node.fault}")


async def _serve_until_stopped(
    node: Server, embedded: EmbeddedWorkers | None, stop: asyncio.Event
) -> None:
    if embedded is None:
        await stop.wait()
        await node.stop()
        return
    if stop.is_set():  # a signal while the node started: its workers stop, not fail
        await embedded.stop()
        await node.stop()
        return
    stopped = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait([stopped, *embedded.tasks], return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    early = [task for task in embedded.tasks if task in done]  # before any signal
    # The workers first: what they have in flight is answered through the node.
    await embedded.stop()
    await node.stop()
    if early and node.fault is None:  # (a fault of the node's own is said first)
        # A worker that ends on its own is a fault: the process exits 1.
        error = None if early[0].cancelled() else early[0].exception()
        raise RuntimeError(f"an embedded worker stopped: {error or 'it returned'}")

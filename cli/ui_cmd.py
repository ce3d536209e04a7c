"""`weft ui`: serve the web UI (the `webui` package) as a process of its own.

It talks to the server as any client does (`--address`, `--namespace`, the TLS
and API key options); `--api-key` is what visitors who have not logged in use,
on loopback only (and never for a request that came through a proxy). It listens
on loopback by default: another address is refused if the UI has a key of its
own (always), and unless the UI serves HTTPS (`--https-cert`/`--https-key`) and
the server asks for credentials — `--insecure` waives those two, with a warning
line each.
"""

from __future__ import annotations

import errno
import socket
import ssl

import click

from cli.errors import EXIT_FAILED, EXIT_USAGE, fail
from cli.params import ADDRESS, client_api_key, client_tls, server_options

_FILE = click.Path(exists=True, dir_okay=False)
_BACKLOG = 2048  # uvicorn's default


@click.command()
@server_options
@click.option(
    "--listen",
    type=ADDRESS,
    envvar="WEFT_UI_LISTEN",
    default="127.0.0.1:7401",
    show_default=True,
    help="HOST:PORT the UI serves HTTP on",
)
@click.option(
    "--https-cert", envvar="WEFT_UI_HTTPS_CERT", type=_FILE, help="PEM certificate: serve HTTPS"
)
@click.option(
    "--https-key", envvar="WEFT_UI_HTTPS_KEY", type=_FILE, help="PEM private key of --https-cert"
)
@click.option(
    "--insecure",
    is_flag=True,
    envvar="WEFT_UI_INSECURE",
    help="on a non-loopback address, serve plain HTTP and skip the check that the server"
    " requires credentials, anyway (each waiver is warned of at start; the UI's own API key"
    " is refused off loopback all the same)",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="a host name the UI is reached by (besides --listen's host and loopback; a :port"
    " is dropped); repeatable, `*.example.com` for a domain's (`*` alone is refused: it"
    " would turn off the DNS-rebinding check)",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
)
def ui(
    address: str,
    namespace: str,
    listen: str,
    https_cert: str | None,
    https_key: str | None,
    insecure: bool,
    allowed_hosts: tuple[str, ...],
    log_level: str,
) -> None:
    """Serve the web UI: runs, histories, timelines, steps, locks, task lists."""
    import asyncio

    import uvicorn

    from webui import UiConfig, create_app
    from webui.config import server_refusal

    config = UiConfig(
        address=address,
        namespace=namespace,
        listen=listen,
        tls=client_tls(),
        api_key=client_api_key(),
        https_cert=https_cert,
        https_key=https_key,
        insecure=insecure,
        allowed_hosts=allowed_hosts,
    )
    refusal = config.refusal()
    if refusal:
        fail("ui", refusal, EXIT_USAGE)
    # The files, the server, then the address, all before any warning or note:
    # a start that fails says one line, and never that it serves.
    https = _https_context(https_cert, https_key) if https_cert and https_key else None
    if config.exposed and not insecure:
        refusal = asyncio.run(server_refusal(config))
        if refusal:
            fail("ui", refusal, EXIT_USAGE)
    sockets = _bound(listen)
    for waiver in config.waivers():
        click.echo(f"weft ui: warning: {waiver}", err=True)
    if config.listens_everywhere and not allowed_hosts:
        click.echo(
            f"weft ui: note: listening on {listen}, but requests from other machines must"
            " name an allowed host (--allowed-host NAME): only localhost, 127.0.0.1 and"
            " [::1] are answered now",
            err=True,
        )
    scheme = "https" if https else "http"
    click.echo(f"weft ui: serving {scheme}://{listen} for the server at {address}", err=True)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            # The context checked above: uvicorn would load the files again (and
            # prompt for the password of an encrypted key).
            ssl_context_factory=(lambda _config, _default: https) if https else None,
            log_level=log_level,
            access_log=log_level == "debug",
            proxy_headers=False,
            server_header=False,
        )
    )
    server.run(sockets=sockets)


def _https_context(cert: str, key: str) -> ssl.SSLContext:
    """The context uvicorn serves HTTPS with; files it could not serve are
    refused in one line (uvicorn would say so as a traceback, after the UI had
    said it was serving)."""
    from orchestrator.tls import TlsFilesError, load_chain

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        load_chain(context, cert, key)
    except TlsFilesError as exc:
        fail("ui", str(exc), EXIT_USAGE)
    return context


def _bound(listen: str) -> list[socket.socket]:
    """Listening sockets for each address `listen`'s host names, made as asyncio
    makes them for uvicorn; a failure is one line with the system's reason."""
    host, _, port = listen.rpartition(":")
    sockets: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(
            host.strip("[]"), int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        for family, kind, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError as exc:  # (as asyncio does: a family this kernel lacks, IPv6 off)
                if exc.errno == errno.EAFNOSUPPORT and len(infos) > 1:
                    continue
                raise
            sockets.append(sock)
            # A restart is not refused for the last run's connections in
            # TIME_WAIT; a v6 socket leaves v4 to the name's v4 address.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            # Listening already, so a visitor who comes once "serving" is said
            # waits for uvicorn rather than being refused.
            sock.listen(_BACKLOG)
    except OSError as exc:  # (a host that does not resolve too: its errno is < 0)
        for sock in sockets:
            sock.close()
        fail("ui", f"cannot listen on {listen}: {exc.strerror or exc}", EXIT_FAILED)
    return sockets


COMMANDS = (ui,)

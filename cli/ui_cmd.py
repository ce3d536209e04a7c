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

import os
import socket
import ssl

import click

from cli.errors import EXIT_USAGE, fail
from cli.params import ADDRESS, client_api_key, client_tls, server_options

_FILE = click.Path(exists=True, dir_okay=False)


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
    if refusal is None and config.exposed and not insecure:
        refusal = asyncio.run(server_refusal(config))
    if refusal:
        fail("ui", refusal, EXIT_USAGE)
    for waiver in config.waivers():
        click.echo(f"weft ui: warning: {waiver}", err=True)
    if config.listens_everywhere and not allowed_hosts:
        click.echo(
            f"weft ui: note: listening on {listen}, but requests from other machines must"
            " name an allowed host (--allowed-host NAME): only localhost, 127.0.0.1 and"
            " [::1] are answered now",
            err=True,
        )
    if https_cert and https_key:
        _check_https_files(https_cert, https_key)
    sock = _bound(listen)  # (before saying "serving": a taken port is said instead)
    scheme = "https" if config.https else "http"
    click.echo(f"weft ui: serving {scheme}://{listen} for the server at {address}", err=True)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            ssl_certfile=https_cert,
            ssl_keyfile=https_key,
            log_level=log_level,
            access_log=log_level == "debug",
            proxy_headers=False,
            server_header=False,
        )
    )
    server.run(sockets=[sock])


def _check_https_files(cert: str, key: str) -> None:
    """Files uvicorn could not serve are refused in one line (it would say so as
    a traceback, after the UI had said it was serving)."""
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
        fail("ui", f"cannot use the certificate {cert} with the key {key}: {reason}", EXIT_USAGE)


def _bound(listen: str) -> socket.socket:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, int(port)), family=family)
    except OSError as exc:  # (create_server's own message repeats the address)
        said = os.strerror(exc.errno) if exc.errno else str(exc)
        fail("ui", f"cannot listen on {listen}: {said}")


COMMANDS = (ui,)

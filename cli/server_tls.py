"""`weft server`'s TLS options and the secure-by-default rule, checked before
anything is opened (a database, a process of `--workers N`)."""

from __future__ import annotations

import sys

import click

from orchestrator.config import ServerConfig


def tls_settings(
    listen: str,
    metrics_listen: str,
    cert: str | None,
    key: str | None,
    client_ca: str | None,
    insecure: bool,
    auth: bool,
) -> dict[str, str]:
    """Check the TLS options and the secure-by-default rule (exit 2 with one line
    when broken); returns them as the environment of `--workers` processes."""
    if bool(cert) != bool(key):
        raise click.UsageError("--tls-cert and --tls-key go together; give both")
    if client_ca and not cert:
        raise click.UsageError("--tls-client-ca needs --tls-cert and --tls-key")
    config = ServerConfig(
        listen=listen,
        metrics_listen=metrics_listen,
        tls_cert=cert or "",
        tls_client_ca=client_ca or "",
        insecure=insecure,
        auth=auth,
    )
    reason = config.insecure_reason()
    if reason is not None:
        click.echo(f"weft server: refusing to start: {reason}", err=True)
        sys.exit(2)
    if cert and key:
        from orchestrator.tls import ServerTls, TlsFiles, TlsFilesError

        # Files that cannot be served are refused here, before a database or a
        # process is opened (the supervisor of `--workers N` would otherwise
        # restart processes that each fail on them, without end).
        try:
            ServerTls(TlsFiles(cert, key, client_ca or ""))
        except TlsFilesError as exc:  # bad input, as for `weft ui`: exit 2
            click.echo(f"weft server: {exc}", err=True)
            sys.exit(2)
    env = {"WEFT_TLS_CERT": cert or "", "WEFT_TLS_KEY": key or "", "WEFT_INSECURE": ""}
    env["WEFT_TLS_CLIENT_CA"] = client_ca or ""
    if insecure:
        env["WEFT_INSECURE"] = "1"
    if auth:
        env["WEFT_AUTH"] = "1"
    return {k: v for k, v in env.items() if v}

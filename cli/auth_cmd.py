"""`weft auth`: API keys and certificate principals (README "Security").

`weft auth bootstrap` makes the first admin key against the database itself,
so a server started with `--auth` never needs a key to make its first key.
Everything else goes through the server as an admin's calls.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

import click

from cli.client import connect
from cli.errors import EXIT_FAILED, fail, reports_errors
from cli.output import moment, print_json, table
from cli.params import DURATION, json_option, server_options
from orchestrator.auth.grants import ROLES
from orchestrator.config import DEFAULT_DB
from sdk.api.weft.v1 import admin_pb2 as a

F = TypeVar("F", bound=Callable[..., Any])


@click.group()
def auth() -> None:
    """API keys and certificate principals of a server started with --auth."""


def _grant_options(fn: F) -> F:
    """--role and the narrowings, for `key create` and `principal add`."""
    for option in reversed(
        (
            click.option(
                "--role",
                required=True,
                type=click.Choice(ROLES),
                help="what the credential may do in --namespace ('*' with admin: everywhere)",
            ),
            click.option(
                "--task-list",
                "task_lists",
                multiple=True,
                help="worker: only these task lists (repeat for more)",
            ),
            click.option(
                "--workflow-type",
                "workflow_types",
                multiple=True,
                help="starter, signaler: only runs of these workflow types",
            ),
            click.option(
                "--signal",
                "signal_names",
                multiple=True,
                help="signaler: only these signal names",
            ),
            click.option("--expires", type=DURATION, help="e.g. 90d; never, unless given"),
            click.option("--name", default="", help="a label for people, e.g. payments-provider"),
        )
    ):
        fn = option(fn)
    return fn


def _grant(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        "task_lists": list(kwargs["task_lists"]),
        "workflow_types": list(kwargs["workflow_types"]),
        "signal_names": list(kwargs["signal_names"]),
        "expires_after": kwargs["expires"],
        "name": kwargs["name"],
    }


@auth.group()
def key() -> None:
    """API keys, sent as `authorization: Bearer <key>` (--api-key, WEFT_API_KEY)."""


@key.command("create")
@_grant_options
@server_options
@json_option
@reports_errors
def key_create(role: str, address: str, namespace: str, as_json: bool, **kwargs: Any) -> None:
    """Create an API key; it is printed once and cannot be shown again."""
    with connect(address, namespace) as client:
        key_id, secret = client.create_api_key(role, **_grant(kwargs))
    if as_json:
        print_json({"id": key_id, "key": secret, "namespace": namespace, "role": role})
        return
    click.echo(secret)
    click.echo(
        f"(key {key_id}: {role} in {namespace!r}; shown once: keep it in a secret store)",
        err=True,
    )


@auth.group()
def principal() -> None:
    """Client certificates (by CN or SAN) that may call a server requiring them."""


@principal.command("add")
@click.argument("subject")
@_grant_options
@server_options
@json_option
@reports_errors
def principal_add(
    subject: str, role: str, address: str, namespace: str, as_json: bool, **kwargs: Any
) -> None:
    """Let client certificates whose CN or a SAN is SUBJECT call with this grant."""
    with connect(address, namespace) as client:
        principal_id = client.add_principal(subject, role, **_grant(kwargs))
    if as_json:
        print_json({"id": principal_id, "subject": subject, "namespace": namespace, "role": role})
        return
    click.echo(principal_id)


def _listing(kind: str) -> Callable[..., None]:
    @click.option("--include-revoked", is_flag=True, help="show revoked ones too")
    @server_options
    @json_option
    @reports_errors
    def listing(address: str, namespace: str, as_json: bool, include_revoked: bool) -> None:
        # Every namespace the caller administers, unless --namespace is given.
        source = click.get_current_context().get_parameter_source("namespace")
        given = source is not click.core.ParameterSource.DEFAULT
        with connect(address, namespace) as client:
            found = client.list_credentials(
                namespace=namespace if given else "", include_revoked=include_revoked
            )
        rows = [c for c in found if c.kind == kind]
        if as_json:
            print_json({"credentials": [_json(c) for c in rows]})
            return
        if not rows:
            click.echo(f"no {kind}s")
            return
        headers = ("ID", "NAME", "SUBJECT", "NAMESPACE", "ROLE", "LIMITED TO", "EXPIRES", "STATE")
        click.echo(table(headers if kind != "key" else headers[:2] + headers[3:], _rows(rows)))

    listing.__doc__ = f"List the {kind}s of the namespaces you administer."
    return listing


def _rows(found: list[a.Credential]) -> list[list[str]]:
    now = datetime.now(UTC)
    out = []
    for c in found:
        expires = _when(c, "expires_at")
        revoked = _when(c, "revoked_at")
        state = "revoked" if revoked else "expired" if expires and expires <= now else "active"
        g = c.grant
        limits = [*g.task_lists, *g.workflow_types, *(f"signal:{s}" for s in g.signal_names)]
        row = [c.id, c.name or "-", c.subject, g.namespace, g.role, ",".join(limits) or "-"]
        if c.kind == "key":
            del row[2]
        out.append([*row, moment(expires), state])
    return out


_Stamp = Literal["created_at", "expires_at", "revoked_at"]


def _when(c: a.Credential, field: _Stamp) -> datetime | None:
    return getattr(c, field).ToDatetime(tzinfo=UTC) if c.HasField(field) else None


def _json(c: a.Credential) -> dict[str, Any]:
    def stamp(field: _Stamp) -> str | None:
        when = _when(c, field)
        return when.isoformat() if when else None

    return {
        "id": c.id,
        "kind": c.kind,
        "subject": c.subject,
        "name": c.name,
        "namespace": c.grant.namespace,
        "role": c.grant.role,
        "task_lists": list(c.grant.task_lists),
        "workflow_types": list(c.grant.workflow_types),
        "signal_names": list(c.grant.signal_names),
        "created_at": stamp("created_at"),
        "created_by": c.created_by,
        "expires_at": stamp("expires_at"),
        "revoked_at": stamp("revoked_at"),
    }


def _revoking(kind: str) -> Callable[..., None]:
    @click.argument("credential_id", metavar="ID")
    @server_options
    @reports_errors
    def revoking(credential_id: str, address: str, namespace: str) -> None:
        with connect(address, namespace) as client:
            client.revoke_credential(credential_id)
        click.echo(f"revoked {credential_id}")

    revoking.__doc__ = f"Revoke a {kind}: every server node refuses it within seconds."
    return revoking


key.command("list")(_listing("key"))
key.command("revoke")(_revoking("key"))
principal.command("list")(_listing("certificate"))
principal.command("remove")(_revoking("principal"))


@auth.command()
@click.option(
    "--db",
    "db_url",
    envvar="WEFT_DATABASE_URL",
    default=DEFAULT_DB,
    show_default=True,
    help="the server's database (this command does not go through a server)",
)
@click.option("--name", default="bootstrap", show_default=True, help="a label for the key")
@click.option("--expires", type=DURATION, help="e.g. 1d; never, unless given")
@click.option("--force", is_flag=True, help="make another admin key even if one is active")
@json_option
@reports_errors
def bootstrap(
    db_url: str, name: str, expires: timedelta | None, force: bool, as_json: bool
) -> None:
    """Create the first admin key (of every namespace) in the database itself.

    Run it once where the server's database is reachable; then create the
    other keys with it, over the network.
    """
    from orchestrator.store.dialect import sqlite_path

    file = sqlite_path(db_url)
    new_file = file is not None and not os.path.exists(file)
    key_id, secret, active = asyncio.run(_bootstrap(db_url, name, expires, force))
    if new_file:
        # Made here, before any server: as meant, or a path mistyped. Said, so
        # that a mistyped one does not pass for the server's database.
        click.echo(f"weft auth bootstrap: no database was at {file}: made a new one", err=True)
    if key_id is None:
        fail(
            "auth bootstrap",
            f"an admin key is active already ({', '.join(active)}): create keys with it,"
            " or give --force to make another",
            EXIT_FAILED,
        )
    if as_json:
        print_json({"id": key_id, "key": secret, "namespace": "*", "role": "admin"})
        return
    click.echo(secret)
    click.echo(f"(admin key {key_id} of every namespace; shown once)", err=True)


async def _bootstrap(
    db_url: str, name: str, expires: timedelta | None, force: bool
) -> tuple[str | None, str, list[str]]:
    from orchestrator.auth import keys
    from orchestrator.store.credentials import KEY, CredentialRow
    from orchestrator.store.store import Store

    store = await Store.open(db_url)
    try:
        now = datetime.now(UTC)
        active = [r.id for r in await store.credentials.active_admins(now)]
        if active and not force:
            return None, "", active
        key_id, secret, whole = keys.new_key()
        digest = keys.keyed_hash(await store.credentials.auth_secret(), secret)
        await store.credentials.add(
            CredentialRow(
                id=key_id,
                kind=KEY,
                subject="",
                secret_hash=digest,
                name=name,
                namespace="*",
                role="admin",
                task_lists=(),
                workflow_types=(),
                signal_names=(),
                created_at=now,
                created_by="weft auth bootstrap",
                expires_at=now + expires if expires else None,
            )
        )
        return key_id, whole, active
    finally:
        await store.close()


COMMANDS = [auth]

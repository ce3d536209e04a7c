"""`weft locks`: who holds each lock and who waits; `weft locks release NAME`
takes a lock from its holder (recorded in the holder's history, with who did it)."""

from __future__ import annotations

import getpass
import socket

import click

from cli.client import connect
from cli.errors import EXIT_USAGE, fail, reports_errors
from cli.output import moment, print_json, table
from cli.params import json_option, server_options
from sdk.workflows import LockInfo


def _operator() -> str:
    """Who the holder's history will say released its lock."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment: the host still says where
        user = "unknown"
    return f"{user}@{socket.gethostname()} (weft locks release)"


@click.command()
@click.argument("action", type=click.Choice(["list", "release"]), default="list")
@click.argument("name", default="")
@click.option("--reason", default="", help="with release: why, recorded in the holder's history")
@server_options
@json_option
@reports_errors
def locks(action: str, name: str, reason: str, address: str, namespace: str, as_json: bool) -> None:
    """List the namespace's locks (holder, then waiters in the order they will
    get it), or force-release NAME: the holder loses it and the next waiter gets it."""
    if action == "release":
        if not name:
            fail("locks", "release needs the lock's NAME", EXIT_USAGE)
        with connect(address, namespace, identity=_operator()) as client:
            done = client.force_release_lock(name, reason=reason)
        if as_json:
            print_json(done.to_json())
            return
        click.echo(f"released {name!r} from {done.released_workflow_id} ({done.released_run_id})")
        if done.granted_workflow_id:
            click.echo(f"granted to {done.granted_workflow_id} ({done.granted_run_id})")
        else:
            click.echo("nobody was waiting: the lock is free")
        return
    with connect(address, namespace) as client:
        found = client.list_locks(name)
    if as_json:
        print_json({"locks": [info.to_json() for info in found]})
        return
    if not found:
        click.echo(f"no lock named {name!r} is held" if name else "no locks held")
        return
    click.echo(table(("LOCK", "PLACE", "WORKFLOW ID", "RUN ID", "SINCE"), _rows(found)))


def _rows(found: list[LockInfo]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for info in found:
        entries = ([("holder", info.holder)] if info.holder else []) + [
            (f"waiting {i}", w) for i, w in enumerate(info.waiters, start=1)
        ]
        for place, entry in entries:
            rows.append(
                (info.lock_name, place, entry.workflow_id, entry.run_id, moment(entry.since))
            )
    return rows


COMMANDS = (locks,)

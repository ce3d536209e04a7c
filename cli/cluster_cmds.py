"""`weft workers`: the namespace's worker sessions, live and recently ended;
`weft nodes`: the server nodes and which one leads the upkeep."""

from __future__ import annotations

from datetime import timedelta

import click

from cli.client import connect
from cli.errors import reports_errors
from cli.output import moment, print_json, table
from cli.params import DURATION, json_option, server_options


@click.command()
@click.option("--task-list", default="", help="only workers polling this task list")
@click.option(
    "--ended-within",
    type=DURATION,
    default="1h",
    show_default=True,
    help="also list workers that stopped or were lost this recently",
)
@server_options
@json_option
@reports_errors
def workers(
    task_list: str, ended_within: timedelta, address: str, namespace: str, as_json: bool
) -> None:
    """List the workers polling the namespace (live first), and those that
    stopped or were lost recently: a lost worker's started tasks timed out
    as WORKER_LOST when its session expired."""
    with connect(address, namespace) as client:
        found = client.list_workers(task_list=task_list, ended_within=ended_within)
    if as_json:
        print_json([w.to_json() for w in found])
        return
    if not found:
        click.echo("no workers" + (f" on task list {task_list!r}" if task_list else ""))
        return
    rows = [
        (
            w.identity,
            w.status,
            f"{w.host}:{w.pid}" if w.pid else w.host,
            ", ".join(f"{name} ({kind})" for kind, name in w.task_lists),
            moment(w.last_heartbeat),
            moment(w.ended),
            w.build_id or "-",
        )
        for w in found
    ]
    headers = ("IDENTITY", "STATUS", "HOST:PID", "TASK LISTS", "LAST HEARTBEAT", "ENDED", "BUILD")
    click.echo(table(headers, rows))


@click.command()
@click.option(
    "--gone-within",
    type=DURATION,
    default="1h",
    show_default=True,
    help="also list nodes that stopped this recently",
)
@server_options
@json_option
@reports_errors
def nodes(gone_within: timedelta, address: str, namespace: str, as_json: bool) -> None:
    """List the server nodes sharing the database: their status (starting,
    ready, draining, gone, lost), which one leads the upkeep (retention purge,
    schedules, the worker reaper), and unexpected shutdowns each has had."""
    with connect(address, namespace) as client:
        found = client.list_nodes(gone_within=gone_within)
    if as_json:
        print_json(found.to_json())
        return
    rows = [
        (
            n.node_id + (" *" if n.leader else ""),
            n.status,
            f"{n.host}:{n.pid}",
            moment(n.started),
            moment(n.last_seen),
            str(n.unexpected_shutdowns)
            + (f" (last {moment(n.last_unexpected_shutdown)})" if n.unexpected_shutdowns else ""),
        )
        for n in found.nodes
    ]
    headers = ("NODE", "STATUS", "HOST:PID", "STARTED", "LAST SEEN", "UNEXPECTED SHUTDOWNS")
    click.echo(table(headers, rows))
    click.echo(
        f"leader: {found.leader} (lease until {moment(found.lease_expires)})"
        if found.leader
        else "leader: none (no node holds the upkeep lease)"
    )


COMMANDS = (workers, nodes)

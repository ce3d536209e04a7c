"""`weft doctor`: what is stuck in a namespace and what to do about it.

Exit codes: 0 nothing looks stuck; 5 (`EXIT_FINDINGS`) findings were printed,
so a script or a cron job can tell "unhealthy" from "could not ask" (1-4, as
every command: CONTRACT.md).
"""

from __future__ import annotations

import sys
from datetime import timedelta

import click

from cli.client import connect
from cli.errors import reports_errors
from cli.output import echo, moment, print_json
from cli.params import DURATION, json_option, server_options
from sdk.diagnostics import Diagnosis, Finding

EXIT_FINDINGS = 5
# Runs named per finding in the text output (--json lists all the server sent).
SHOWN_RUNS = 5


@click.command()
@click.option(
    "--no-poller-after",
    type=DURATION,
    default="60s",
    show_default=True,
    help="report tasks on a task list nobody polled for this long (and that waited as long)",
)
@server_options
@json_option
@reports_errors
def doctor(no_poller_after: timedelta, address: str, namespace: str, as_json: bool) -> None:
    """Find stuck runs: tasks on task lists no worker polls, overdue deadlines,
    lock waiters behind a blocked holder, histories near the event limit.
    Exit 0 when nothing looks stuck, 5 when findings are printed."""
    with connect(address, namespace) as client:
        found = client.diagnose(no_poller_after=no_poller_after)
    if as_json:
        print_json(found.to_json())
    else:
        echo(report(found))
    if not found.healthy:
        sys.exit(EXIT_FINDINGS)


def report(d: Diagnosis) -> str:
    if d.healthy:
        return f"namespace {d.namespace!r}: nothing looks stuck"
    lines = [
        f"namespace {d.namespace!r}: {len(d.findings)} finding"
        f"{'s' if len(d.findings) != 1 else ''}"
        + (" (more not listed: a bound was reached)" if d.truncated else "")
    ]
    for f in d.findings:
        lines += ["", *finding_lines(f)]
    return "\n".join(lines)


def finding_lines(f: Finding) -> list[str]:
    out = [f"{f.kind}  {f.explanation}"]
    if f.since is not None:
        out.append(f"  since   {moment(f.since)}")
    if f.chain:
        out.append(
            "  chain   "
            + " -> ".join(f"{lock!r} held by {wid} ({rid})" for lock, wid, rid in f.chain)
        )
    if f.executions:
        shown = ", ".join(f"{wid} ({rid})" for wid, rid in f.executions[:SHOWN_RUNS])
        rest = len(f.executions) - SHOWN_RUNS
        out.append(f"  runs    {shown}" + (f" and {rest} more" if rest > 0 else ""))
    out.append(f"  do      {f.action}")
    return out


COMMANDS = (doctor,)

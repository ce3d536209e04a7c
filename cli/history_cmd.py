"""`weft history`: a run's events as a table, or JSON, optionally followed live."""

from __future__ import annotations

from collections.abc import Iterable

import click

from cli.client import connect
from cli.errors import reports_errors
from cli.output import (
    HISTORY_HEADERS,
    echo,
    history_row,
    json_text,
    print_json,
    table,
)
from cli.params import json_option, server_options
from sdk.events import Event


@click.command()
@click.argument("workflow_id")
@click.option("--run-id", default="", help="a specific run (default: the latest)")
@click.option("--follow", "-f", is_flag=True, help="stream new events until the run closes")
@server_options
@json_option
@reports_errors
def history(
    workflow_id: str, run_id: str, follow: bool, address: str, namespace: str, as_json: bool
) -> None:
    """The event history of a workflow run.

    With --json, one document {"workflow_id", "run_id", "events": [...]}; with
    --json --follow, one JSON event per line as they happen.
    """
    with connect(address, namespace) as client:
        # Resolve the run before printing anything (an unknown one is a one-line
        # error, not a header and then an error); pinning it also keeps a follow
        # from drifting to a later run.
        run_id = client.describe(workflow_id, run_id=run_id).info.run_id
        events = client.iter_history(workflow_id, run_id=run_id, follow=follow)
        if as_json and not follow:
            doc = [e.to_json() for e in events]
            print_json({"workflow_id": workflow_id, "run_id": run_id, "events": doc})
        elif as_json:
            for event in events:
                click.echo(json_text(event.to_json()))
        elif not follow:
            echo(table(HISTORY_HEADERS, [history_row(e) for e in events]))
        else:
            _stream(events)


def _stream(events: Iterable[Event]) -> None:
    """Rows as they come: fixed column widths, since later rows are not known yet."""
    widths = (5, 12, 24)
    echo("  ".join(h.ljust(w) for h, w in zip(HISTORY_HEADERS, (*widths, 0), strict=True)))
    for event in events:
        row = history_row(event)
        cells = [cell.ljust(w) for cell, w in zip(row, (*widths, 0), strict=True)]
        echo("  ".join(cells).rstrip())

"""`weft replay`: replay a step workflow the Brooklyn way (STEPS.md "Replay").
The point is resolved here, from the run's history, by the step interpreter, so
that a replay that cannot be done is refused at once with the reason; the
service then records it in the open run, or opens a new run for a closed one."""

from __future__ import annotations

import click

from cli.client import connect
from cli.errors import EXIT_FAILED, EXIT_USAGE, fail, reports_errors
from cli.output import print_json
from cli.params import json_option, server_options


@click.command()
@click.argument("workflow_id")
@click.option("--resuming", is_flag=True, help="the current step again, if it can")
@click.option(
    "--from", "from_step", metavar="STEP", help="the nearest replay point at or before STEP"
)
@click.option("--from-start", is_flag=True, help="from the start")
@click.option("--last", is_flag=True, help="from the last replay point")
@click.option("--force", is_flag=True, help="skip the checks (not for `replayable: disabled`)")
@click.option("--run-id", default="", help="this run (default: the open run, else the latest)")
@click.option("--reason", default="", help="why, recorded with the request")
@server_options
@json_option
@reports_errors
def replay(
    workflow_id: str,
    resuming: bool,
    from_step: str | None,
    from_start: bool,
    last: bool,
    force: bool,
    run_id: str,
    reason: str,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Replay a step workflow: an open run in place, a failed, timed-out, canceled
    or terminated one as a new run of the same workflow id."""
    from workers.steps.definition import DefinitionError, parse
    from workers.steps.replay import ReplayRefused, resolve

    modes = {"resuming": resuming, "from": from_step is not None, "from_start": from_start}
    chosen = [m for m, on in {**modes, "last": last}.items() if on]
    if len(chosen) != 1:
        fail("replay", "give one of --resuming, --from STEP, --from-start, --last", EXIT_USAGE)
    how = chosen[0]
    with connect(address, namespace) as client:
        run = client.describe(workflow_id, run_id=run_id).info
        history = client.history(workflow_id, run_id=run.run_id)
        source = str(history[0].get("definition") or "") if history else ""
        if not source:
            fail("replay", f"{workflow_id} is not a step workflow: only those replay", EXIT_FAILED)
        try:
            definition = parse(source, "<snapshot>")
            point = resolve(
                definition,
                history,
                how,
                from_step or "",
                force,
                workflow_id=workflow_id,
                run_id=run.run_id,
            )
        except (ReplayRefused, DefinitionError) as exc:
            fail("replay", f"refused: {exc}", EXIT_FAILED)
        replaying, new_run = client.request_replay(
            workflow_id,
            how,  # type: ignore[arg-type]
            step=from_step or "",
            force=force,
            point=point.to_json(),
            run_id=run.run_id,
            reason=reason,
        )
    if as_json:
        print_json(
            {
                "workflow_id": workflow_id,
                "run_id": replaying,
                "new_run": new_run,
                "replay_of_run_id": run.run_id if new_run else None,
                "step": point.index,
                "resuming": point.resume,
            }
        )
    elif new_run:
        click.echo(f"replaying run {run.run_id} as new run {replaying}")
    else:
        click.echo(f"replaying run {replaying} in place")


COMMANDS = (replay,)

"""`weft start`, `signal`, `cancel`, `terminate`, `describe`, `list`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from cli.client import connect
from cli.doctor_cmd import finding_lines
from cli.errors import EXIT_FAILED, one_line, reports_errors
from cli.errors import describe as describe_error
from cli.history_cmd import history
from cli.output import compact, echo, moment, print_json, span, table
from cli.params import DURATION, JSON, json_option, server_options
from cli.register_cmd import register
from sdk.errors import (
    DeadlineExceededError,
    WorkflowCanceledError,
    WorkflowFailedError,
    WorkflowOutcomeError,
    WorkflowTerminatedError,
    WorkflowTimedOutError,
)
from sdk.workflows import WorkflowDescription


@click.command()
@click.argument("workflow_type")
@click.option("--id", "workflow_id", help="the workflow id (default: TYPE-<uuid>)")
@click.option("--input", "input_", type=JSON, help="the input, as JSON")
@click.option("--task-list", default="", help="where its decision tasks go")
@click.option("--version", default="", help="the workflow type's version")
@click.option("--execution-timeout", type=DURATION, help="close it as timed out after this")
@click.option("--decider-timeout", type=DURATION, help="each decision task's time limit")
@click.option("--wait", is_flag=True, help="wait for the close and print the result")
@click.option("--timeout", "wait_timeout", type=DURATION, help="with --wait: give up after this")
@server_options
@json_option
@reports_errors
def start(
    workflow_type: str,
    workflow_id: str | None,
    input_: Any,
    task_list: str,
    version: str,
    execution_timeout: timedelta | None,
    decider_timeout: timedelta | None,
    wait: bool,
    wait_timeout: timedelta | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Start a workflow; print its workflow id and run id."""
    if wait_timeout is not None and not wait:
        raise click.UsageError("--timeout goes with --wait (how long to wait for the close)")
    with connect(address, namespace) as client:
        run = client.start_workflow(
            workflow_type,
            input_,
            workflow_id=workflow_id,
            version=version,
            task_list=task_list,
            execution_timeout=execution_timeout,
            decider_timeout=decider_timeout,
        )
        doc: dict[str, Any] = {"workflow_id": run.workflow_id, "run_id": run.run_id}
        if not wait:
            _show(doc, as_json)
            return
        if not as_json:
            echo(f"workflow_id  {run.workflow_id}\nrun_id       {run.run_id}")
        try:
            result = client.result(run.workflow_id, run_id=run.run_id, timeout=wait_timeout)
        except WorkflowOutcomeError as exc:
            if as_json:
                status = _OUTCOME_STATUS.get(type(exc), "failed")
                doc |= {"status": status, "reason": exc.reason, "details": exc.details}
                print_json(doc)
                raise SystemExit(EXIT_FAILED) from None
            raise
        except (Exception, KeyboardInterrupt) as exc:
            # The wait ended before the close (it gave up, the server went, a
            # Ctrl-C), but the run started: stdout says which, as without --json.
            if as_json:
                print_json(doc | _unclosed(exc, address))
            raise
        if as_json:
            print_json(doc | {"status": "completed", "result": result})
        else:
            echo(f"result       {compact(result, 10_000)}")


_OUTCOME_STATUS: dict[type[WorkflowOutcomeError], str] = {
    WorkflowFailedError: "failed",
    WorkflowTimedOutError: "timed_out",
    WorkflowCanceledError: "canceled",
    WorkflowTerminatedError: "terminated",
}


def _unclosed(exc: BaseException, address: str) -> dict[str, Any]:
    """`start --wait --json` when the wait ends before the close: the status is
    `open` when the wait gave up (--timeout), unknown (null) when it was cut
    short; `waited` is what stderr says."""
    if isinstance(exc, DeadlineExceededError):
        return {"status": "open", "waited": exc.message}
    said = "interrupted" if isinstance(exc, KeyboardInterrupt) else describe_error(exc, address)
    return {"status": None, "waited": one_line(said)}


def _show(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(doc)
    else:
        echo(f"workflow_id  {doc['workflow_id']}\nrun_id       {doc['run_id']}")


@click.command()
@click.argument("workflow_id")
@click.argument("name")
@click.option("--input", "input_", type=JSON, help="the signal's input, as JSON")
@click.option("--run-id", default="", help="a specific run (default: the open one)")
@click.option("--request-id", help="signals with the same request id are delivered once")
@server_options
@reports_errors
def signal(
    workflow_id: str,
    name: str,
    input_: Any,
    run_id: str,
    request_id: str | None,
    address: str,
    namespace: str,
) -> None:
    """Send the signal NAME to a workflow."""
    with connect(address, namespace) as client:
        client.signal(workflow_id, name, input_, run_id=run_id, request_id=request_id)
    echo(f"signaled {workflow_id}: {name}")


@click.command()
@click.argument("workflow_id")
@click.option("--run-id", default="", help="a specific run (default: the open one)")
@click.option("--reason", default="", help="recorded in the history")
@server_options
@reports_errors
def cancel(workflow_id: str, run_id: str, reason: str, address: str, namespace: str) -> None:
    """Ask a workflow's decider to cancel it."""
    with connect(address, namespace) as client:
        client.cancel(workflow_id, run_id=run_id, reason=reason)
    echo(f"cancel requested: {workflow_id}")


@click.command()
@click.argument("workflow_id")
@click.option("--run-id", default="", help="a specific run (default: the open one)")
@click.option("--reason", default="", help="recorded in the history")
@server_options
@reports_errors
def terminate(workflow_id: str, run_id: str, reason: str, address: str, namespace: str) -> None:
    """Close a workflow at once, without asking its decider."""
    with connect(address, namespace) as client:
        client.terminate(workflow_id, run_id=run_id, reason=reason)
    echo(f"terminated: {workflow_id}")


@click.command()
@click.argument("workflow_id")
@click.option("--run-id", default="", help="a specific run (default: the latest)")
@server_options
@json_option
@reports_errors
def describe(workflow_id: str, run_id: str, address: str, namespace: str, as_json: bool) -> None:
    """Status, decider state, pending activities, timers and locks of a workflow."""
    with connect(address, namespace) as client:
        found = client.describe(workflow_id, run_id=run_id)
    if as_json:
        print_json(found.to_json())
    else:
        echo(_description(found))


def _description(d: WorkflowDescription) -> str:
    info = d.info
    kind = info.workflow_type + (f" (version {info.version})" if info.version else "")
    fields = [
        ("workflow_id", info.workflow_id),
        ("run_id", info.run_id),
        ("type", kind),
        ("task_list", info.task_list),
        ("status", info.status + (" (cancel requested)" if d.cancel_requested else "")),
        ("started", moment(info.start_time)),
        ("closed", moment(info.close_time)),
        ("history", f"{info.history_length} events"),
        ("decider", d.decider_state),
        (
            "timeouts",
            f"execution {span(d.execution_timeout.total_seconds())},"
            f" decider {span(d.decider_timeout.total_seconds())}",
        ),
    ]
    for name, value in (
        ("continued_from", info.continued_from_run_id),
        ("parent_run", info.parent_run_id),
        ("replay_of", info.replay_of_run_id),
        ("replayed_by", info.replayed_by_run_id),
        ("started_by", d.started_by),
    ):
        if value:
            fields.append((name, value))
    width = max(len(k) for k, _ in fields)
    out = [f"{k.ljust(width)}  {v}" for k, v in fields]
    if d.pending_activities:
        rows = [
            (
                a.activity_id,
                a.activity_type,
                a.state,
                a.task_list,
                a.identity + (f" ({a.principal})" if a.principal else "") or "-",
                compact(a.heartbeat_details, 40) if a.heartbeat_details is not None else "-",
            )
            for a in d.pending_activities
        ]
        headers = ("ACTIVITY", "TYPE", "STATE", "TASK LIST", "WORKER", "HEARTBEAT")
        out += ["", "pending activities:", table(headers, rows)]
    if d.pending_timers:
        rows_t = [(t.timer_id, moment(t.fire_time)) for t in d.pending_timers]
        out += ["", "pending timers:", table(("TIMER", "FIRES AT"), rows_t)]
    if d.locks:
        rows_l = [(lk.lock_name, lk.state, str(lk.requested_event_id)) for lk in d.locks]
        out += ["", "locks:", table(("LOCK", "STATE", "REQUESTED AT EVENT"), rows_l)]
    if d.problems:
        out += ["", "problems (weft doctor):"]
        for finding in d.problems:
            out += finding_lines(finding)
    return "\n".join(out)


@click.command(name="list")
@click.option("--open", "status", flag_value="open", help="only open runs")
@click.option("--closed", "status", flag_value="closed", help="only closed runs")
@click.option("--type", "workflow_type", default="", help="only runs of this workflow type")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@server_options
@json_option
@reports_errors
def list_(
    status: str | None,
    workflow_type: str,
    limit: int,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Workflow runs, newest first."""
    with connect(address, namespace) as client:
        runs = client.list(
            status="open" if status == "open" else "closed" if status == "closed" else None,
            workflow_type=workflow_type,
            limit=limit,
        )
    if as_json:
        print_json({"executions": [r.to_json() for r in runs]})
        return
    if not runs:
        echo("no workflows")
        return
    rows = [
        (
            r.workflow_id,
            r.run_id,
            r.workflow_type,
            r.status,
            moment(r.start_time),
            moment(r.close_time),
        )
        for r in runs
    ]
    echo(table(("WORKFLOW ID", "RUN ID", "TYPE", "STATUS", "STARTED", "CLOSED"), rows))


COMMANDS = (start, signal, cancel, terminate, describe, history, list_, register)

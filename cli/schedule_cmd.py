"""`weft schedule create|list|describe|pause|unpause|trigger|backfill|update|delete`:
schedules that start a workflow at each fire time of a cron (in a time zone)
or every fixed duration (README "Schedules")."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from cli.client import connect
from cli.errors import EXIT_USAGE, fail, reports_errors
from cli.output import compact, echo, moment, print_json, span, table
from cli.params import DURATION, JSON, json_option, server_options
from sdk.schedules import ScheduleDescription

F = TypeVar("F", bound=Callable[..., Any])
OVERLAPS = ("skip", "buffer-one", "allow", "cancel-previous", "terminate-previous")


class MomentType(click.ParamType):  # type: ignore[type-arg]
    """An instant in ISO 8601 (`2026-11-25T02:00:00+01:00`); without an offset, UTC."""

    name = "time"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        text = str(value).strip()
        try:
            at = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            self.fail(f"{text!r} is not an ISO 8601 time such as 2026-11-25T02:00:00Z", param, ctx)
        return at if at.tzinfo else at.replace(tzinfo=UTC)


MOMENT = MomentType()


@click.group()
def schedule() -> None:
    """Schedules: start a workflow at each fire time, each slot once."""


def _spec_options(fn: F) -> F:
    """The options of create and update (update: only those given change)."""
    for decorator in reversed(
        (
            click.option("--workflow-type", help="the workflow type each slot starts"),
            click.option("--cron", help="5 fields: minute hour day-of-month month day-of-week"),
            click.option("--every", type=DURATION, help="a fixed interval instead (e.g. 15m)"),
            click.option("--timezone", help="IANA time zone of --cron (default UTC)"),
            click.option("--input", "input_", type=JSON, help="the input of each run, as JSON"),
            click.option("--task-list", help="where its decision tasks go"),
            click.option(
                "--overlap",
                type=click.Choice(OVERLAPS),
                help="while a run it started is open (default skip)",
            ),
            click.option(
                "--catch-up-window",
                type=DURATION,
                help="slots missed while down start if this recent (default 365d)",
            ),
            click.option("--jitter", type=DURATION, help="delay each start up to this much"),
            click.option("--start-at", type=MOMENT, help="no slots before this (ISO 8601)"),
            click.option("--end-at", type=MOMENT, help="no slots after this (ISO 8601)"),
        )
    ):
        fn = decorator(fn)
    return fn


def _changes(kwargs: dict[str, Any]) -> dict[str, Any]:
    keys = ("workflow_type", "cron", "every", "timezone", "task_list", "overlap")
    out = {k: kwargs[k] for k in keys if kwargs.get(k) is not None}
    for key in ("catch_up_window", "jitter", "start_at", "end_at"):
        if kwargs.get(key) is not None:
            out[key] = kwargs[key]
    if kwargs.get("input_") is not None:
        out["input"] = kwargs["input_"]
    return out


@schedule.command("create")
@click.argument("name")
@_spec_options
@click.option("--paused", is_flag=True, help="create it paused")
@click.option("--note", default="", help="why (shown by describe)")
@server_options
@reports_errors
def create(name: str, paused: bool, note: str, address: str, namespace: str, **kwargs: Any) -> None:
    """Create schedule NAME: --workflow-type and one of --cron and --every."""
    changes = _changes(kwargs)
    if "workflow_type" not in changes:
        fail("schedule create", "--workflow-type is required", EXIT_USAGE)
    if ("cron" in changes) == ("every" in changes):
        fail("schedule create", "give one of --cron and --every", EXIT_USAGE)
    with connect(address, namespace) as client:
        client.create_schedule(name, paused=paused, note=note, **changes)
        d = client.describe_schedule(name, next_count=1)
    echo(f"created schedule {name}" + (f"; next {moment(d.next_times[0])}" if d.next_times else ""))


@schedule.command("update")
@click.argument("name")
@_spec_options
@server_options
@reports_errors
def update(name: str, address: str, namespace: str, **kwargs: Any) -> None:
    """Change what the options say; the rest stays. Slots from now on follow it."""
    changes = _changes(kwargs)
    if not changes:
        fail("schedule update", "nothing to change: give at least one option", EXIT_USAGE)
    if "cron" in changes and "every" in changes:
        fail("schedule update", "give one of --cron and --every", EXIT_USAGE)
    with connect(address, namespace) as client:
        client.update_schedule(name, **changes)
    echo(f"updated schedule {name}")


@schedule.command("list")
@server_options
@json_option
@reports_errors
def list_(address: str, namespace: str, as_json: bool) -> None:
    """The namespace's schedules: spec, state, next fire time, counts."""
    with connect(address, namespace) as client:
        found = client.list_schedules()
    if as_json:
        print_json({"schedules": [d.to_json() for d in found]})
        return
    if not found:
        echo("no schedules")
        return
    rows = [
        (
            d.name,
            d.workflow_type,
            _spec(d),
            "paused" if d.paused else "active",
            moment(d.next_times[0]) if d.next_times else "-",
            str(d.started),
            str(d.skipped),
            str(d.missed),
        )
        for d in found
    ]
    headers = ("NAME", "WORKFLOW TYPE", "SPEC", "STATE", "NEXT", "STARTED", "SKIPPED", "MISSED")
    echo(table(headers, rows))


def _spec(d: ScheduleDescription) -> str:
    if d.every is not None:
        return f"every {span(d.every.total_seconds())}"
    return f"{d.cron} ({d.timezone or 'UTC'})"


@schedule.command("describe")
@click.argument("name")
@click.option("--next", "next_count", type=click.IntRange(1, 100), default=5, show_default=True)
@server_options
@json_option
@reports_errors
def describe(name: str, next_count: int, address: str, namespace: str, as_json: bool) -> None:
    """The schedule, its next fire times, its latest runs and their outcome."""
    with connect(address, namespace) as client:
        d = client.describe_schedule(name, next_count=next_count)
    if as_json:
        print_json(d.to_json())
        return
    lines = [
        ("name", d.name),
        ("workflow type", d.workflow_type),
        ("task list", d.task_list or "(the type's default)"),
        ("spec", _spec(d)),
        ("overlap", d.overlap),
        ("catch-up window", span(d.catch_up_window.total_seconds())),
        ("jitter", span(d.jitter.total_seconds()) if d.jitter else "none"),
        ("window", f"{moment(d.start_at) or '-'} .. {moment(d.end_at) or '-'}"),
        ("state", ("paused" if d.paused else "active") + (f": {d.note}" if d.note else "")),
        ("counts", f"started {d.started}, skipped {d.skipped}, missed {d.missed}"),
        ("last slot", moment(d.last_slot) or "-"),
    ]
    if d.input is not None:
        lines.append(("input", compact(d.input)))
    if d.buffered_slot is not None:
        lines.append(("buffered", moment(d.buffered_slot)))
    if d.pending:
        lines.append(("pending", f"{d.pending} triggered or backfilled slots"))
    for key, value in lines:
        echo(f"{key:<16} {value}")
    echo("next")
    for at in d.next_times:
        echo(f"  {moment(at)}")
    if d.recent_runs:
        echo(
            table(
                ("SLOT", "WORKFLOW ID", "RUN ID", "STATUS"),
                [
                    (moment(r.slot), r.workflow_id, r.run_id, r.status or "purged")
                    for r in d.recent_runs
                ],
            )
        )


def _pausing(paused: bool) -> Callable[..., None]:
    @click.argument("name")
    @click.option("--note", default="", help="why (shown by describe)")
    @server_options
    @reports_errors
    def command(name: str, note: str, address: str, namespace: str) -> None:
        with connect(address, namespace) as client:
            if paused:
                client.pause_schedule(name, note=note)
            else:
                client.unpause_schedule(name, note=note)
        echo(f"{'paused' if paused else 'unpaused'} schedule {name}")

    command.__doc__ = (
        "Stop starting runs (trigger and backfill still do)."
        if paused
        else "Start runs again, from now: slots that came while paused are not started."
    )
    return command


schedule.command("pause")(_pausing(True))
schedule.command("unpause")(_pausing(False))


@schedule.command("trigger")
@click.argument("name")
@server_options
@reports_errors
def trigger(name: str, address: str, namespace: str) -> None:
    """Start a run now (through the overlap policy); print its workflow id."""
    with connect(address, namespace) as client:
        echo(client.trigger_schedule(name))


@schedule.command("backfill")
@click.argument("name")
@click.argument("start", type=MOMENT)
@click.argument("end", type=MOMENT)
@server_options
@reports_errors
def backfill(name: str, start: datetime, end: datetime, address: str, namespace: str) -> None:
    """Start the runs of the slots from START to END (ISO 8601), those not started before."""
    if end < start:
        fail("schedule backfill", "END is before START", EXIT_USAGE)
    with connect(address, namespace) as client:
        slots = client.backfill_schedule(name, start, end)
    echo(f"backfilling {slots} slots of schedule {name}")


@schedule.command("delete")
@click.argument("name")
@server_options
@reports_errors
def delete(name: str, address: str, namespace: str) -> None:
    """Delete the schedule; the runs it started stay."""
    with connect(address, namespace) as client:
        client.delete_schedule(name)
    echo(f"deleted schedule {name}")


COMMANDS = (schedule,)

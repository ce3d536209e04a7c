"""The printed table and the targets of the issue, checked against the
medians of the same run."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Spread = dict[str, Any]


def num(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def fmt(item: Spread | None, digits: int = 0) -> str:
    """`median [min-max]`."""
    if not item or item.get("median") is None:
        return "-"
    if item["n"] == 1:
        return num(item["median"], digits)
    lo, hi = num(item["min"], digits), num(item["max"], digits)
    return f"{num(item['median'], digits)} [{lo}-{hi}]"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def targets(scenarios: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of the performance issue with the measured median and whether it is met."""
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, goal: str, met: bool) -> None:
        out.append({"target": name, "median": value, "goal": goal, "met": met})

    side = scenarios.get("side_by_side", {})
    _deployment(add, side.get("points", []), {}, THREE_PROCESSES)
    # The one process's CPU holds the server's work and the workers': its echo
    # calls are the echo's server CPU per call at the same concurrency, measured
    # in this run's side-by-side repeats.
    echo_ms = {
        p["inflight"]: p["echo.server_cpu_per_call_ms"]["median"]
        for p in side.get("points", [])
        if "echo.server_cpu_per_call_ms" in p
    }
    _deployment(add, scenarios.get("one_process", {}).get("points", []), echo_ms, ONE_PROCESS)
    growth = scenarios.get("history_growth", {}).get("sticky", {})
    sticky = growth.get("ratio_largest_over_smallest", {})
    if "total_ms" in sticky:
        value = sticky["total_ms"]["median"]
        label = "decision task cost, largest ÷ smallest history (sticky)"
        add(label, value, "<= 1.5", value <= 1.5)
    dispatch = scenarios.get("dispatch", {})
    for key, label in (
        ("ratio_signal_to_decider_over_round_trip", "signal → DeciderStarted"),
        ("ratio_schedule_to_start_over_round_trip", "ActivityScheduled → ActivityStarted"),
    ):
        if key in dispatch:
            value = dispatch[key]["median"]
            add(f"{label}, in bare round trips", value, "<= 3", value <= 3)
    nodes = scenarios.get("two_nodes", {})
    if "result_after_close_ms" in nodes:
        value = nodes["result_after_close_ms"]["median"]
        add("result() through another node, ms after the close", value, "<= 100", value <= 100)
    return out


@dataclass(frozen=True)
class _Labels:
    """How one deployment's throughput targets are named ({c}: in flight)."""

    peer: str
    cpu_ms: str
    echo_calls: str
    grows: str


THREE_PROCESSES = _Labels(
    "Weft activities/s ÷ DBOS steps/s, {c} in flight",
    "server CPU per activity (ms), {c} in flight",
    "server CPU per activity in echo calls, {c} in flight",
    "throughput grows from 1 to 4 to 16 in flight",
)
ONE_PROCESS = _Labels(
    "the same, one process (weft server --embed), {c} in flight",
    "process CPU per activity (ms), one process, {c} in flight",
    "process CPU per activity in echo calls, one process, {c} in flight",
    "throughput grows from 1 to 4 to 16 in flight, one process",
)


def _deployment(
    add: Callable[[str, float | None, str, bool], None],
    points: list[dict[str, Any]],
    echo_ms: dict[int, float],
    labels: _Labels,
) -> None:
    """One deployment's targets at 4 and 16 in flight (against DBOS, CPU per
    activity in ms and in echo calls: the point's own per-repeat ratio, else
    over `echo_ms` at its concurrency), and whether its throughput grows."""
    rates = []
    for point in points:
        c = point["inflight"]
        rates.append(point["weft.activities_per_s"]["median"])
        if c < 4:
            continue
        peer = point["ratio.weft_activities_over_dbos_steps"]["median"]
        add(labels.peer.format(c=c), peer, ">= 1", peer >= 1)
        ms = point["weft.server_cpu_per_activity_ms"]["median"]
        add(labels.cpu_ms.format(c=c), ms, "<= 2", ms <= 2)
        if ratio := point.get("ratio.server_cpu_per_activity_in_echo_calls"):
            calls = ratio["median"]
        elif echo_ms.get(c):
            calls = ms / echo_ms[c]
        else:
            continue
        add(labels.echo_calls.format(c=c), calls, "<= 8", calls <= 8)
    if len(rates) >= 3:
        # The smaller step's growth (4 ÷ 1 or 16 ÷ 4): met when each step grows.
        least = min(later / earlier for earlier, later in itertools.pairwise(rates))
        add(labels.grows, least, "> 1", least > 1)


def render(doc: dict[str, Any]) -> str:
    scenarios: dict[str, Any] = doc["scenarios"]
    pg = doc["postgres"]
    machine = doc["machine"]
    parts = [
        f"Weft benchmark ({doc['profile']}), {machine['cpus']} CPUs {machine['cpu_model']},"
        f" PostgreSQL {pg.get('server_version')}"
        f" (synchronous_commit={pg.get('synchronous_commit')}, fsync={pg.get('fsync')}),"
        " SQLite synchronous=FULL.",
        "Figures: median [min-max] over repeats; ratios are taken per repeat, then the median.",
    ]
    parts += _side_by_side(scenarios.get("side_by_side"))
    parts += _growth(scenarios.get("history_growth"))
    parts += _dispatch(scenarios.get("dispatch"))
    parts += _steps(scenarios.get("steps"))
    parts += _sqlite(scenarios.get("sqlite"))
    parts += _two_nodes(scenarios.get("two_nodes"))
    parts += _secured(scenarios.get("secured"))
    parts += _one_process(scenarios.get("one_process"))
    rows = [
        [t["target"], num(t["median"], 2), t["goal"], "met" if t["met"] else "NOT met"]
        for t in doc["targets"]
    ]
    parts += ["", "Targets", table(["target", "median", "goal", ""], rows)]
    return "\n".join(parts)


def _problem(title: str, result: dict[str, Any] | None) -> list[str] | None:
    if result is None:
        return ["", f"{title}: not run"]
    for key in ("skipped", "error"):
        if key in result:
            return ["", f"{title}: {key}: {result[key]}"]
    return None


def _side_by_side(result: dict[str, Any] | None) -> list[str]:
    title = "1-3. Throughput, the DBOS peer and the bare limits, side by side"
    if (problem := _problem(title, result)) is not None:
        return problem
    assert result is not None
    head = (
        f"{title} ({result['workflows_per_batch']} workflows x {result['steps_per_workflow']}"
        " trivial activities / steps per batch)"
    )
    rows, rows2, rows3, rows4, rows5 = [], [], [], [], []
    for p in result["points"]:
        rows.append(
            [
                str(p["inflight"]),
                fmt(p["weft.activities_per_s"]),
                fmt(p["weft.decision_tasks_per_s"]),
                fmt(p["dbos.steps_per_s"]),
                fmt(p["ratio.weft_activities_over_dbos_steps"], 2),
                fmt(p["weft.server_cpu_per_activity_ms"], 2),
                fmt(p["echo.server_cpu_per_call_ms"], 3),
                fmt(p["ratio.server_cpu_per_activity_in_echo_calls"], 1),
            ]
        )
        rows2.append(
            [
                str(p["inflight"]),
                fmt(p["weft.schedule_to_start_p50_ms"], 1),
                fmt(p["weft.schedule_to_start_p99_ms"], 1),
                fmt(p["weft.activity_to_next_p50_ms"], 1),
                fmt(p["weft.activity_to_next_p99_ms"], 1),
                fmt(p["append.txns_per_s"]),
                fmt(p["ratio.append_txns_per_activity"], 1),
                fmt(p["echo.calls_per_s"]),
                fmt(p["ratio.echo_calls_per_activity"], 1),
            ]
        )
        rows3.append(
            [
                str(p["inflight"]),
                fmt(p.get("weft.rpcs_per_activity"), 1),
                fmt(p.get("weft.transactions_per_activity"), 1),
                fmt(p.get("weft.statements_per_activity"), 1),
                fmt(p["weft.server_cpu_cores"], 2),
            ]
        )
        if "dbos.machine_cpu_per_step_ms" in p:  # (results before 2026-11-26 lack it)
            rows5.append(
                [
                    str(p["inflight"]),
                    fmt(p["weft.machine_cpu_per_activity_ms"], 2),
                    fmt(p["weft.server_cpu_per_activity_ms"], 2),
                    fmt(p["weft.workers_cpu_per_activity_ms"], 2),
                    # (results before 2026-11-28 lack it; a cluster elsewhere too)
                    fmt(p.get("weft.pg_cpu_per_activity_ms"), 2),
                    fmt(p.get("echo.client_cpu_per_call_ms"), 3),
                    fmt(p["weft.machine_cores"], 2),
                    fmt(p["dbos.machine_cpu_per_step_ms"], 2),
                    fmt(p["dbos.cpu_per_step_ms"], 2),
                    fmt(p["dbos.machine_cores"], 2),
                    fmt(p["ratio.weft_machine_cpu_per_activity_over_dbos_step"], 2),
                ]
            )
        if "floor.calls_per_s" in p:  # (results from before the floor lack it)
            rows4.append(
                [
                    str(p["inflight"]),
                    fmt(p["floor.calls_per_s"]),
                    fmt(p["floor.server_cpu_per_activity_ms"], 2),
                    fmt(p["ratio.floor_cpu_per_activity_in_echo_calls"], 1),
                    # (runs of the floor's first day were paced only, or unpaced only)
                    fmt(p.get("floor.unpaced_calls_per_s")),
                    fmt(p.get("floor.unpaced_server_cpu_per_activity_ms"), 2),
                    fmt(p.get("weft.server_cpu_above_floor_ms"), 2),
                    fmt(p.get("ratio.server_cpu_above_floor_in_echo_calls"), 1),
                    fmt(p["ratio.server_cpu_per_activity_over_floor"], 2),
                ]
            )
    return [
        "",
        head,
        table(
            [
                "in flight",
                "Weft act/s",
                "decision tasks/s",
                "DBOS steps/s",
                "Weft÷DBOS",
                "server CPU ms/act",
                "echo CPU ms/call",
                "÷ (echo calls)",
            ],
            rows,
        ),
        "",
        table(
            [
                "in flight",
                "sched→start p50 ms",
                "p99",
                "act→next act p50 ms",
                "p99",
                "bare append txn/s",
                "appends per act",
                "bare echo/s",
                "echoes per act",
            ],
            rows2,
        ),
        "",
        "Per activity, counted by the server (RPCs answered, SQL statements sent,"
        " transactions committed), and the server's CPU in cores",
        table(
            ["in flight", "RPCs/act", "transactions/act", "statements/act", "server cores"],
            rows3,
        ),
        *_machine(rows5),
        *_floor(rows4),
    ]


def _machine(rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    return [
        "",
        "What a unit costs the whole machine (/proc/stat: every process, PostgreSQL and"
        " the driver included), and the cores busy meanwhile. Where the cores are"
        " saturated, units/s is about cores ÷ CPU per unit. Of Weft's, PostgreSQL's"
        " part (bench.pg_cpu: the database's backends and the cluster's own processes);"
        " beside it, what a bare grpc.aio call costs its client (the echo's caller).",
        table(
            [
                "in flight",
                "Weft ms/act",
                "server",
                "workers",
                "PostgreSQL",
                "bare client ms/call",
                "cores",
                "DBOS ms/step",
                "DBOS process",
                "cores",
                "Weft÷DBOS ms",
            ],
            rows,
        ),
    ]


def _floor(rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    return [
        "",
        "The floor of Weft's stack (bench.floor: grpc.aio + psycopg, one commit and one"
        " hand-off per call, none of Weft's code), per activity at Weft's RPCs per"
        " activity: paced to the RPCs/s Weft's server answered (the floor compared"
        " with), and unpaced; Weft's server CPU above the paced floor, per repeat",
        table(
            [
                "in flight",
                "paced calls/s",
                "floor ms/act",
                "÷ (echo calls)",
                "unpaced calls/s",
                "unpaced ms/act",
                "Weft above floor ms/act",
                "÷ (echo calls)",
                "Weft÷floor",
            ],
            rows,
        ),
    ]


def _growth(result: dict[str, Any] | None) -> list[str]:
    title = "4. History growth: one decision task at each history size (ms)"
    if (problem := _problem(title, result)) is not None:
        return problem
    assert result is not None
    out = ["", title]
    for mode, label in (
        ("sticky", "sticky (the decider's cache holds the run: only new events are sent)"),
        ("full", "full (a decider without the run: the whole history each time)"),
    ):
        part = result.get(mode)
        if not part:
            continue
        rows = [
            [
                num(s["history_events"]),
                fmt(s["events_sent"]),
                fmt(s["poll_ms"], 2),
                fmt(s["pages_ms"], 2),
                fmt(s["decider_ms"], 2),
                fmt(s["respond_ms"], 2),
                fmt(s["total_ms"], 2),
            ]
            for s in part["sizes"]
        ]
        ratios = part["ratio_largest_over_smallest"]
        out += [
            label,
            table(
                ["history", "events sent", "poll", "more pages", "decider", "respond", "total"],
                rows,
            ),
            "largest ÷ smallest: total "
            + fmt(ratios["total_ms"], 1)
            + ", server part "
            + fmt(ratios["server_ms"], 1)
            + ", decider part "
            + fmt(ratios["decider_ms"], 1),
            "",
        ]
    return out[:-1]


def _dispatch(result: dict[str, Any] | None) -> list[str]:
    title = "5. Dispatch latency with an idle poller waiting (server clock)"
    if (problem := _problem(title, result)) is not None:
        return problem
    assert result is not None
    rows = [
        [
            "signal → DeciderStarted",
            fmt(result["signal_to_decider_started_ms"], 2),
            fmt(result["ratio_signal_to_decider_over_round_trip"], 1),
        ],
        [
            "ActivityScheduled → ActivityStarted",
            fmt(result["activity_scheduled_to_started_ms"], 2),
            fmt(result["ratio_schedule_to_start_over_round_trip"], 1),
        ],
        ["bare grpc.aio round trip p50", fmt(result["bare_round_trip_p50_ms"], 2), "1"],
    ]
    return ["", title, table(["hand-off", "ms", "in round trips"], rows)]


def _steps(result: dict[str, Any] | None) -> list[str]:
    title = "6. Steps: the same workload as a YAML step workflow vs SDK code"
    if (problem := _problem(title, result)) is not None:
        return problem
    assert result is not None
    rows = [
        [
            str(p["inflight"]),
            fmt(p["steps.activities_per_s"]),
            fmt(p["code.activities_per_s"]),
            fmt(p["ratio.steps_over_code_activities_per_s"], 2),
            fmt(p["steps.server_cpu_per_activity_ms"], 2),
            fmt(p["ratio.steps_over_code_server_cpu_per_activity"], 2),
            fmt(p["steps.workers_cpu_per_activity_ms"], 2),
            fmt(p["ratio.steps_over_code_workers_cpu_per_activity"], 2),
            fmt(p["steps.decision_tasks_per_workflow"], 1),
        ]
        for p in result["points"]
    ]
    headers = [
        "in flight",
        "steps act/s",
        "code act/s",
        "steps÷code",
        "server CPU ms/act",
        "÷ code",
        "workers CPU ms/act",
        "÷ code",
        "decisions/wf",
    ]
    return ["", title, table(headers, rows)]


def _sqlite(result: dict[str, Any] | None) -> list[str]:
    title = "Throughput on SQLite (synchronous=FULL) vs PostgreSQL"
    if (problem := _problem(title, result)) is not None:
        return problem
    assert result is not None
    rows = [
        [
            str(p["inflight"]),
            fmt(p["sqlite.activities_per_s"]),
            fmt(p["postgres.activities_per_s"]),
            fmt(p["ratio.sqlite_over_postgres_activities_per_s"], 2),
            fmt(p["sqlite.server_cpu_per_activity_ms"], 2),
            fmt(p["sqlite.schedule_to_start_p50_ms"], 1),
            fmt(p["sqlite.activity_to_next_p50_ms"], 1),
        ]
        for p in result["points"]
    ]
    headers = [
        "in flight",
        "SQLite act/s",
        "PG act/s",
        "SQLite÷PG",
        "server CPU ms/act",
        "sched→start p50",
        "act→next p50",
    ]
    return ["", title, table(headers, rows)]


def _two_nodes(result: dict[str, Any] | None) -> list[str]:
    title = "More than one server process on one PostgreSQL database"
    if (problem := _problem(title, result)) is not None:
        return problem
    assert result is not None
    w = result["server_workers"]
    rows = [
        [
            label,
            fmt(w[f"{key}.activities_per_s"]),
            fmt(w[f"{key}.server_cpu_per_activity_ms"], 2),
            fmt(w[f"{key}.server_cpu_cores"], 2),
            fmt(w[f"{key}.transactions_per_activity"], 1),
        ]
        for label, key in (("1 process", "one_process"), ("--workers 2", "two_processes"))
    ]
    headers = ["server", "act/s", "server CPU ms/act", "server cores", "transactions/act"]
    return [
        "",
        title,
        f"result() through a second node returns {fmt(result['result_after_close_ms'], 1)} ms"
        " after the close (server clock)",
        f"Throughput at {w['inflight']} in flight, two processes ÷ one:"
        f" {fmt(w['ratio.two_over_one_activities_per_s'], 2)}",
        table(headers, rows),
    ]


def _secured(result: dict[str, Any] | None) -> list[str]:
    title = "What TLS and authentication cost (a node with --tls-cert --auth, API keys)"
    if (problem := _problem(title, result)) is not None:
        return problem
    assert result is not None
    rows = [
        [
            label,
            fmt(result[f"{key}.activities_per_s"]),
            fmt(result[f"{key}.server_cpu_per_activity_ms"], 2),
            fmt(result[f"{key}.server_cpu_cores"], 2),
        ]
        for label, key in (("plaintext, no auth", "plain"), ("TLS + API keys", "secured"))
    ]
    return [
        "",
        title,
        f"At {result['inflight']} in flight, secured ÷ plain: throughput"
        f" {fmt(result['ratio.secured_over_plain_activities_per_s'], 2)}, server CPU per"
        f" activity {fmt(result['ratio.secured_over_plain_server_cpu_per_activity'], 2)}",
        table(["node", "act/s", "server CPU ms/act", "server cores"], rows),
    ]


def _one_process(result: dict[str, Any] | None) -> list[str]:
    title = (
        "One process: the decider and runner inside the server (weft server --embed"
        " bench.workload), against DBOS"
    )
    if (problem := _problem(title, result)) is not None:
        return problem
    assert result is not None
    rows = [
        [
            str(p["inflight"]),
            fmt(p["weft.activities_per_s"]),
            fmt(p["dbos.steps_per_s"]),
            fmt(p["ratio.weft_activities_over_dbos_steps"], 2),
            fmt(p["weft.server_cpu_per_activity_ms"], 2),
            fmt(p["weft.server_cpu_cores"], 2),
            fmt(p["weft.machine_cpu_per_activity_ms"], 2),
            fmt(p["dbos.machine_cpu_per_step_ms"], 2),
            fmt(p["weft.rpcs_per_activity"], 1),
        ]
        for p in result["points"]
    ]
    headers = [
        "in flight",
        "Weft act/s",
        "DBOS steps/s",
        "Weft÷DBOS",
        "process CPU ms/act",
        "process cores",
        "machine ms/act",
        "DBOS machine ms/step",
        "calls/act",
    ]
    return ["", title, table(headers, rows)]

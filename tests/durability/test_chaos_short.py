"""The short version of `make chaos`: 20 workflows, each with activities, a timer
and a signal sent two or three times under one request id, while the server,
the deciders and the runners are killed with SIGKILL at random moments and
restarted, one at a time (`Options.one_down_at_a_time`: so that it fits a slow
machine); then every history must show nothing lost, duplicated, stuck or
wrong. On SQLite, and on two server nodes sharing one PostgreSQL database
(the server is shared here, so it is not restarted: `make chaos` does that on a
cluster of its own).

The checker itself is tested on doctored histories: each fault it exists to
catch is caught."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from chaos.check import check_history
from chaos.report import report
from chaos.run import Figures, Mode, Options, run_mode
from chaos.workflow import SIGNAL, TIMER, expected, first_inputs, signal_value, step
from sdk import Event

WORKFLOWS = 20
SECONDS = 75.0
SEED = 1515


async def run_short(mode: Mode, log_dir: Path, postgres_url: str = "") -> Figures:
    figures = await run_mode(
        Options(
            mode,
            WORKFLOWS,
            SECONDS,
            log_dir,
            postgres_url=postgres_url,
            seed=SEED,
            one_down_at_a_time=True,
        )
    )
    print("\n".join(report(figures)))
    return figures


def assert_clean(figures: Figures) -> None:
    lines = "\n".join(report(figures))
    assert figures.ok, lines
    assert figures.verdict.workflows == WORKFLOWS, lines
    for kind in ("server", "decider", "runner"):
        assert figures.kills[kind] >= 1, f"no {kind} was killed\n{lines}"
    # Every run took part: 3 activities, a timer, a signal, start and close at least.
    assert figures.verdict.events >= WORKFLOWS * 20, lines


@pytest.mark.timeout(SECONDS + 120)
async def test_chaos_sqlite(tmp_path: Path) -> None:
    assert_clean(await run_short("sqlite", tmp_path))


@pytest.mark.postgres
@pytest.mark.timeout(SECONDS + 120)
async def test_chaos_two_nodes_postgres(postgres_admin_url: str, tmp_path: Path) -> None:
    assert_clean(await run_short("two-nodes", tmp_path, postgres_admin_url))


# -- the checker catches what it is there for ---------------------------------------------


def good_history(n: int) -> list[Event]:
    """What run `n` of `chaos.workflow` records when all goes well."""
    events: list[tuple[str, dict[str, Any]]] = [
        ("WorkflowStarted", {"input": {"n": n, "pause": 1.0}}),
        ("DecisionTaskScheduled", {}),
        ("DecisionTaskStarted", {}),
        ("DecisionTaskCompleted", {}),
        ("TimerScheduled", {"timer_id": TIMER}),
    ]

    def schedule(aid: str) -> int:
        events.append(("ActivityScheduled", {"activity_id": aid}))
        return len(events)  # its event id

    firsts = first_inputs(n)
    scheduled = {aid: schedule(aid) for aid in firsts}
    for aid, x in firsts.items():
        events.append(
            ("ActivitySuccess", {"scheduled_event_id": scheduled[aid], "result": step(x)})
        )
    events += [
        ("Signal", {"signal_name": SIGNAL, "input": {"v": signal_value(n)}}),
        ("TimerExpired", {"timer_id": TIMER}),
    ]
    last = schedule("a2")
    events += [
        ("ActivitySuccess", {"scheduled_event_id": last, "result": expected(n)["y"]}),
        ("WorkflowSuccess", {"result": expected(n)}),
    ]
    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    return [Event(i, kind, stamp, attrs) for i, (kind, attrs) in enumerate(events, start=1)]


def renumber(events: list[Event]) -> list[Event]:
    return [Event(i, e.type, e.timestamp, e.attributes) for i, e in enumerate(events, start=1)]


def test_the_checker_passes_a_good_history() -> None:
    history = good_history(7)
    verdict = check_history(7, "chaos-7", history)
    assert verdict.ok, verdict.problems
    assert verdict.events == len(history)


def test_the_checker_catches_each_fault() -> None:
    good = good_history(7)
    signal = next(e for e in good if e.type == "Signal")
    success = next(e for e in good if e.type == "ActivitySuccess")
    cases: dict[str, tuple[str, list[Event]]] = {
        "a gap in the event ids": ("lost", [*good[:3], *good[4:]]),
        "a signal recorded twice": ("duplicated", renumber([*good[:-1], signal, good[-1]])),
        "an activity that succeeded twice": (
            "duplicated",
            renumber([*good[:-1], success, good[-1]]),
        ),
        "a timer that never fired": (
            "lost",
            renumber([e for e in good if e.type != "TimerExpired"]),
        ),
        "a run left open": ("stuck", good[:-1]),
        "a wrong result": (
            "wrong",
            [*good[:-1], Event(len(good), "WorkflowSuccess", good[-1].timestamp, {"result": 0})],
        ),
        "events after the close": ("duplicated", renumber([*good, good[1]])),
    }
    for what, (counter, history) in cases.items():
        verdict = check_history(7, "chaos-7", history)
        assert not verdict.ok, what
        assert getattr(verdict, counter) >= 1, f"{what}: {verdict.problems}"

"""The targets table: each deployment's rows come from its own points."""

from __future__ import annotations

from typing import Any

from bench import report


def _m(value: float) -> dict[str, float]:
    return {"median": value}


def _point(c: int, rate: float, cpu_ms: float, **extra: float) -> dict[str, Any]:
    return {
        "inflight": c,
        "weft.activities_per_s": _m(rate),
        "ratio.weft_activities_over_dbos_steps": _m(rate / 300),
        "weft.server_cpu_per_activity_ms": _m(cpu_ms),
        **{k: _m(v) for k, v in extra.items()},
    }


def _by_name(scenarios: dict[str, Any]) -> dict[str, tuple[float | None, bool]]:
    return {t["target"]: (t["median"], t["met"]) for t in report.targets(scenarios)}


def test_one_process_cpu_is_counted_in_the_echo_of_the_same_run() -> None:
    side = [
        _point(
            c,
            rate,
            2.4,
            **{
                "ratio.server_cpu_per_activity_in_echo_calls": 9.0,
                "echo.server_cpu_per_call_ms": echo,
            },
        )
        for c, rate, echo in ((1, 200, 0.4), (4, 350, 0.25), (16, 380, 0.2))
    ]
    one = [_point(1, 270, 2.6), _point(4, 500, 1.9), _point(16, 460, 1.9)]
    rows = _by_name({"side_by_side": {"points": side}, "one_process": {"points": one}})
    # Three processes: the per-repeat ratio the point holds.
    assert rows["server CPU per activity in echo calls, 4 in flight"] == (9.0, False)
    assert rows["throughput grows from 1 to 4 to 16 in flight"][1] is True
    # One process: its own CPU over the echo's server CPU per call at that concurrency.
    calls, met = rows["process CPU per activity in echo calls, one process, 4 in flight"]
    assert calls is not None and abs(calls - 1.9 / 0.25) < 1e-9 and met
    assert rows["process CPU per activity (ms), one process, 16 in flight"] == (1.9, True)
    # 500 at 4 in flight, 460 at 16: not growing; the figure is that step's (460 ÷ 500),
    # not 16's over 1's (460 ÷ 270, above 1 beside "NOT met").
    assert rows["throughput grows from 1 to 4 to 16 in flight, one process"] == (0.92, False)
    # Three processes: the smaller step, 380 ÷ 350.
    assert rows["throughput grows from 1 to 4 to 16 in flight"] == (380 / 350, True)


def test_without_the_echo_the_one_process_has_no_echo_row() -> None:
    one = [_point(1, 270, 2.6), _point(4, 500, 2.1), _point(16, 520, 1.9)]
    rows = _by_name({"one_process": {"points": one}})
    assert not any("echo calls, one process" in name for name in rows)
    assert rows["process CPU per activity (ms), one process, 4 in flight"] == (2.1, False)
    assert rows["throughput grows from 1 to 4 to 16 in flight, one process"][1] is True

"""The three echo servers `bench.fronts` compares each answer the bare echo
load, and their CPU per call is measured (a broken front fails here instead
of printing a number)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench import fronts


@pytest.mark.parametrize("mode", fronts.MODES)
async def test_each_front_answers_the_echo_and_its_cpu_is_counted(
    mode: str, tmp_path: Path
) -> None:
    found = await fronts.compare(0.5, 1, (2,), tmp_path, modes=(mode,))
    [per_call] = found[mode][2]
    # (no calls would give NaN, which fails this too)
    assert per_call > 0 and math.isfinite(per_call)


def test_an_unknown_front_is_refused() -> None:
    with pytest.raises(SystemExit, match="no mode 'uvloop'"):
        fronts.serve("uvloop", 0)

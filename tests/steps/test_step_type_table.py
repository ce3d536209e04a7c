"""What the run knows of each step type is declared with the type, in its entry
of `steptypes.STEP_TYPES`: whether its work runs on a runner, whether it is
idempotent by default, whether it runs nested steps, and in a frame of their
own. These are the facts the interpreter had as lists of names before."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from workers.steps.steptypes import STEP_TYPES, StepType


def _names(fact: Callable[[StepType], bool]) -> set[str]:
    return {name for name, step_type in STEP_TYPES.items() if fact(step_type)}


def test_each_types_facts() -> None:
    assert _names(lambda t: t.external) == {"activity", "http", "shell"}
    assert _names(lambda t: not t.idempotent) == {"activity", "http", "shell", "fail"}
    assert _names(lambda t: t.compound) == {
        "if",
        "switch",
        "foreach",
        "workflow",
        "subworkflow",
        "child",
    }
    assert _names(lambda t: t.own_frame) == {"foreach", "workflow"}


def test_work_on_a_runner_is_never_idempotent_by_default() -> None:
    with pytest.raises(ValueError, match="not idempotent"):
        replace(STEP_TYPES["activity"], idempotent=True)

"""What declaring a step type takes: how its definition reads and how it runs,
in one place."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workers.steps.executor import Body
from workers.steps.syntax import _Given, _Reader


@dataclass(frozen=True)
class StepType:
    """One step type of STEPS.md: its shorthand template, its long-form keys,
    the parser of its own fields (`Step.args`) and its body."""

    shorthand: _Reader
    keys: Mapping[str, str]  # long-form key -> the name the builder reads
    build: Callable[[_Given], dict[str, Any]]
    body: Body

"""What declaring a step type takes: how its definition reads and how it runs,
in one place."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

from workers.steps.executor import Body
from workers.steps.syntax import _Given, _Reader


@dataclass(frozen=True)
class StepType:
    """One step type of STEPS.md: its shorthand template, its long-form keys,
    the parser of its own fields (`Step.args`) and its body; then, by keyword,
    what the run knows of the type beside (`executor.StepTypeShape`)."""

    shorthand: _Reader
    keys: Mapping[str, str]  # long-form key -> the name the builder reads
    build: Callable[[_Given], dict[str, Any]]
    body: Body
    _: KW_ONLY
    external: bool = False
    """Its work is an activity task on a runner; every other step is decided
    inside the decider from the history alone. Such work is not idempotent."""
    idempotent: bool = True
    """Whether a step of this type is idempotent when neither the step
    (`idempotent: yes|no`) nor the workflow (`idempotent: all`) says: not for
    external work, nor for `fail`."""
    compound: bool = False
    """It runs nested steps; its idempotency is computed: idempotent when all
    of them are (`Run.idempotent`)."""
    own_frame: bool = False
    """Its nested steps run in a frame of their own (a nested workflow, a
    foreach), not inline in the step's frame: a jump does not look inside them
    for its target."""

    def __post_init__(self) -> None:
        if self.external and self.idempotent:
            raise ValueError("a step type whose work runs on a runner is not idempotent")

"""The step types of STEPS.md, each declared once: its parser and its body side
by side in one module of this package, and its entry (`StepType`) in that
module's `TYPES`, with what else the run knows of the type (whether its work
runs on a runner, is idempotent, runs nested steps, in a frame of their own). A
new step type is a function pair and an entry there; the parser (`stepparse`),
the run (`Run.types`, handed the table by the interpreter) and the web UI's
steps view read the table below."""

from __future__ import annotations

from workers.steps.steptypes import basic, blocks, external, fanout, retry
from workers.steps.steptypes.base import StepType

STEP_TYPES: dict[str, StepType] = {
    **basic.TYPES,
    **retry.TYPES,
    **blocks.TYPES,
    **fanout.TYPES,
    **external.TYPES,
}

__all__ = ["STEP_TYPES", "StepType"]

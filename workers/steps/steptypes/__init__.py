"""The step types of STEPS.md, each declared once: its parser and its body side
by side in one module of this package, and its entry (`StepType`) in that
module's `TYPES`. A new step type is a function pair and an entry there; the
parser (`stepparse`) and the run (`Run.bodies`) read the table below."""

from __future__ import annotations

from workers.steps.executor import Body
from workers.steps.steptypes import basic, blocks, external, fanout, retry
from workers.steps.steptypes.base import StepType

STEP_TYPES: dict[str, StepType] = {
    **basic.TYPES,
    **retry.TYPES,
    **blocks.TYPES,
    **fanout.TYPES,
    **external.TYPES,
}
BODIES: dict[str, Body] = {name: step_type.body for name, step_type in STEP_TYPES.items()}

__all__ = ["BODIES", "STEP_TYPES", "StepType"]

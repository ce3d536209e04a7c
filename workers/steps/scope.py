"""Name lookup for `${…}`: what a step's expressions can see.

Roots: `workflow` (id, run_id, name, input, var, error, step.ID, previous_step,
util), `input`, `output`, `error`; any other name is searched in the step's
input, the previous output (if a map), the variables, then the workflow input.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from workers.steps.expressions import UnknownName
from workers.steps.model import Definition
from workers.steps.operations import RunOperations

_MISSING: Any = object()


class RunView(Protocol):
    """What a scope reads of the run (`executor.Run`)."""

    @property
    def ops(self) -> RunOperations: ...
    @property
    def definition(self) -> Definition: ...
    @property
    def input(self) -> dict[str, Any]: ...
    @property
    def step_records(self) -> dict[str, dict[str, Any]]: ...


class FrameView(Protocol):
    """What a scope reads of the frame it looks names up in (`executor.Frame`,
    which builds scopes: named here by its shape, so this module does not
    import the executor)."""

    @property
    def run(self) -> RunView: ...
    @property
    def input(self) -> Mapping[str, Any]: ...
    @property
    def variables(self) -> dict[str, Any]: ...
    @property
    def previous_output(self) -> Any: ...
    @property
    def error(self) -> dict[str, Any] | None: ...


@dataclass
class StepScope:
    """The names visible to one step of one frame."""

    frame: FrameView
    key: str = ""
    step_input: Mapping[str, Any] | None = None
    output: Any = _MISSING
    error: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def root(self, name: str) -> Any:
        frame = self.frame
        if name in self.extra:
            return self.extra[name]
        if name == "workflow":
            return self._workflow()
        if name == "input":
            return frame.input
        if name == "output":
            return frame.previous_output if self.output is _MISSING else self.output
        if name == "error" and self.error is not None:
            return self.error
        if self.step_input is not None and name in self.step_input:
            return self.step_input[name]
        previous = frame.previous_output if self.output is _MISSING else self.output
        if isinstance(previous, Mapping) and name in previous:
            return previous[name]
        if name in frame.variables:
            return frame.variables[name]
        if name in frame.input:
            return frame.input[name]
        raise UnknownName(f"unknown name {name!r}")

    def _workflow(self) -> dict[str, Any]:
        frame = self.frame
        run = frame.run
        return {
            "id": run.ops.workflow_id,
            "run_id": run.ops.run_id,
            "name": run.definition.name,
            "version": run.definition.version,
            "input": run.input,
            "var": frame.variables,
            "error": self.error if self.error is not None else frame.error,
            "step": run.step_records,
            "previous_step": {"output": frame.previous_output},
            "util": _util(run.ops.now, run.ops.run_id, self.key),
        }


def _util(now: datetime, run_id: str, key: str) -> dict[str, Any]:
    """Time and randomness, taken from the history: `now` is the time of the
    decision task, and the random values are derived from the run and the step,
    so a replay sees exactly the values the first run saw."""
    moment = now if now.tzinfo else now.replace(tzinfo=UTC)
    digest = hashlib.sha256(f"{run_id}/{key}".encode()).digest()
    return {
        "now": moment.isoformat(),
        "now_utc": moment.astimezone(UTC).isoformat(),
        "now_iso": moment.astimezone(UTC).isoformat(),
        "now_instant": int(moment.timestamp() * 1000),
        "random": int.from_bytes(digest[:8], "big") / 2**64,
        "uuid": str(uuid.UUID(bytes=digest[:16], version=4)),
    }

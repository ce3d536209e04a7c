"""What a step can raise: a `StepError` (handled by `on-error`), and the
control-flow signals by which a step tells the loop to jump, replay or return.

`StepInterpreterError` is the root of every error class of `workers.steps`
(parsing, expressions, retries, budgets, replays), so a caller can catch all of
them at once. Classes that callers also catch as `ValueError` keep that base
too. The control-flow signals (`FlowSignal`) are not errors and stay outside
it: catching the root must never swallow a jump or a return."""

from __future__ import annotations

from typing import Any


class StepInterpreterError(Exception):
    """The root of the step package's errors; never raised itself."""


class StepError(StepInterpreterError):
    """An error of a step, as `on-error` conditions and the workflow's failure
    see it: `type` (`ActivityFailed`, `Timeout`, `Fail`, `ExpressionError`, …),
    a readable `message`, and optional `details`."""

    def __init__(self, type: str, message: str, details: Any = None, step: str = "") -> None:
        super().__init__(f"{type}: {message}")
        self.type = type
        self.message = message
        self.details = details
        self.step = step

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"type": self.type, "message": self.message}
        if self.details is not None:
            doc["details"] = self.details
        if self.step:
            doc["step"] = self.step
        return doc


class FlowSignal(Exception):
    """Base of the jumps a step makes; never handled by `on-error`."""


class Jump(FlowSignal):
    """Continue at another step (`goto`, `next`), looked up in enclosing blocks
    when the current one has no step of that id."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.target = target


class Return(FlowSignal):
    """`return`: end the workflow (or the nested workflow) with a value."""

    def __init__(self, value: Any) -> None:
        super().__init__("return")
        self.value = value


class Replay(FlowSignal):
    """A replay within the run: `resume` re-runs the current step, `from`
    restarts at a replay point with the variables as they were there."""

    def __init__(self, mode: str, target: str | None = None, force: bool = False) -> None:
        super().__init__(mode)
        self.mode = mode
        self.target = target
        self.force = force

"""Where an operator's replay goes on: a point in the workflow's own steps,
resolved from the history before the replay is asked for and carried in the
ReplayRequested event, so that the run that replays (the same one, or a new run
for a closed one) needs nothing but its own history to get there."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from workers.steps.errors import StepError

if TYPE_CHECKING:
    from workers.steps.executor import Frame


@dataclass(frozen=True)
class ReplayPoint:
    index: int
    """The workflow step to go on at (0 with no entry: the start)."""
    resume: bool
    """Run that step again with its recorded input and variables, unchecked."""
    variables: dict[str, Any] = field(default_factory=dict)
    previous_output: Any = None
    input: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    marked: bool = False
    """Whether the point is a replay point (it stays one for later replays)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> ReplayPoint:
        if not isinstance(doc, dict) or not isinstance(doc.get("index"), int):
            raise StepError("ReplayError", "the replay request carries no replay point")
        known = {k: doc[k] for k in cls.__dataclass_fields__ if k in doc}
        return cls(**known)

    def apply(self, top: Frame) -> tuple[int, bool]:
        """Set the fresh workflow frame up at this point; (step index, resume)."""
        from workers.steps.executor import Entry

        if not 0 <= self.index < max(len(top.steps), 1):
            raise StepError(
                "ReplayError", f"the replay point names step {self.index}, which is not there"
            )
        top.variables.clear()
        top.variables.update(copy.deepcopy(self.variables))
        top.previous_output = copy.deepcopy(self.previous_output)
        if self.marked:
            top.marks.add(self.index)
            top.last_point = self.index
        if self.resume:
            top.entries[self.index] = Entry(
                self.key,
                copy.deepcopy(self.variables),
                copy.deepcopy(self.input),
                copy.deepcopy(self.previous_output),
            )
        return self.index, self.resume

"""`weft replay`, the step interpreter's half: from a run's history, where a
replay of each mode goes (STEPS.md "Replay"), or why it cannot.

- `resuming`: the current step again, with its recorded input and variables,
  when it is idempotent; else back to the last replay point; else refused.
- `from STEP`: the nearest replay point at or before STEP, with the variables
  as they were there; conditions are checked again and inputs re-evaluated.
- `from_start`: the start, when the workflow is `replayable: from start`.
- `last`: the last replay point.
- `force` skips the checks (resuming any step, any step exactly); a workflow
  that is `replayable: disabled` is never replayed by an operator.

The answer is a `ReplayPoint`, which the service copies into ReplayRequested
for the interpreter to read back.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from sdk.events import Event
from workers.steps import continuation
from workers.steps.errors import Replay, StepError, StepInterpreterError
from workers.steps.interpreter import Interpreter, _batches
from workers.steps.model import Definition
from workers.steps.points import ReplayPoint

MODES = ("resuming", "from", "from_start", "last")


class ReplayRefused(StepInterpreterError):
    """The replay cannot be done; the message says why."""


def resolve(
    definition: Definition,
    history: Sequence[Event],
    mode: str,
    step: str = "",
    force: bool = False,
    *,
    workflow_id: str = "",
    run_id: str = "",
) -> ReplayPoint:
    """The point a replay of `mode` goes to in this history (the run's ids make
    what derives from them, such as `workflow.util.random`, what it was)."""
    if mode not in MODES:
        raise ReplayRefused(f"unknown replay mode {mode!r}")
    if definition.replayable == "disabled":
        raise ReplayRefused(f"workflow {definition.name!r} is `replayable: disabled`")
    interpreter = Interpreter(definition, workflow_id, run_id)
    for batch in _batches(history, -1):
        due = continuation.recorded(history, batch.completed_id)
        interpreter.advance(batch.events, batch.started, replaying=True, continue_due=due)
    top = interpreter.top
    if top is None:
        raise ReplayRefused("the run has not started its steps yet: nothing to replay")
    if mode == "resuming":
        signal = Replay("resume", force=force)
    elif mode == "from":
        if not step:
            raise ReplayRefused("replay --from needs a step id")
        signal = Replay("from", step, force=force)
    else:
        signal = Replay("from", "start" if mode == "from_start" else "last", force=force)
    try:
        index, resume = top.resolve_replay(signal)
    except StepError as exc:
        hint = "" if force else " (--force replays anyway)"
        raise ReplayRefused(exc.message + hint) from None
    entry = top.entries.get(index) if resume else None
    return ReplayPoint(
        index=index,
        resume=resume,
        variables=copy.deepcopy(entry.variables if entry else top.variables),
        previous_output=copy.deepcopy(entry.previous_output if entry else top.previous_output),
        input=copy.deepcopy(entry.input) if entry else {},
        key=entry.key if entry else "",
        marked=index in top.marks,
    )

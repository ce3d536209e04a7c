"""Step workflows that run for ever: the interpreter continues a run as new on
its own, at a safe point, carrying where it is to the new run.

When: the service suggests it (the history nears its event limit), or the
definition's `continue-as-new-after` (a duration since the run started, a number
of events, or both: `1h or 5000 events`) is reached.

Where: at the start of one of the workflow's own steps (not inside a nested
block), when nothing else is outstanding (no activity, timer other than the
workflow's `timeout`, child, lock request or outbound signal) and the run has
started at least one step (so every run makes progress). The workflow parks
there, and the decision task answers `ContinueAsNew`, carrying the held locks
(no `LockReleased` between the runs: the service hands them over).

What goes on: the workflow input, the step to start at, the variables and the
previous output, the replay points (and the entries they restore), the step
outputs and retry counts, the signals received and not yet waited for, and the
time left of the workflow's `timeout`. The new run's input is `{"$continuation":
{...}}`; the service carries the run's retention itself.

Determinism: whether a task continues depends on the service's suggestion,
which a replay cannot know. A replayed task is taken to have been due exactly
when the history records that it decided `ContinueAsNew` (a close refused for
events it had not seen, WorkflowCloseFailed, is followed by a task that replays
it); a due task parks at its first safe step start, so the replay parks at the
same one. A parked workflow stays parked: the next task continues again, with
whatever came in meanwhile (a signal is kept for the new run).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from sdk.decider import Decision
from sdk.durations import parse_duration
from sdk.events import Event
from workers.steps.entry import Entry
from workers.steps.errors import StepError
from workers.steps.operations import RunOperations
from workers.steps.runtime import Future

CONTINUATION_KEY = "$continuation"
"""The one key of a continued run's input: what the run it continues carried over."""
MIN_EVENTS = 100
"""The smallest `continue-as-new-after` event count: below it, a run would spend
its history on little more than starting and continuing."""
_EVENTS = re.compile(r"^(\d+)\s+events?$")


class Run(Protocol):
    """What a continuation reads and restores of the run (`executor.Run`, named
    here by its shape so that this module does not import the executor)."""

    input: dict[str, Any]
    step_records: dict[str, dict[str, Any]]
    retry_records: dict[str, list[datetime]]
    automatic_replays: dict[str, int]

    @property
    def ops(self) -> RunOperations: ...


class Frame(Protocol):
    """What a continuation reads and restores of the workflow's own frame
    (`executor.Frame`)."""

    previous_output: Any
    marks: set[int]
    last_point: int | None
    entries: dict[int, Entry]
    visits: dict[int, int]

    @property
    def run(self) -> Run: ...
    @property
    def steps(self) -> Sequence[Any]: ...
    @property
    def path(self) -> str: ...
    @property
    def variables(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ContinueAfter:
    """A definition's `continue-as-new-after`: whichever comes first."""

    time: timedelta | None = None
    events: int | None = None


def parse_after(text: str) -> ContinueAfter:
    """`1h`, `5000 events`, or `1h or 5000 events`; ValueError says what is wrong."""
    time: timedelta | None = None
    events: int | None = None
    parts = [p.strip() for p in re.split(r"\s+or\s+", text.strip())]
    if not text.strip() or len(parts) > 2:
        raise ValueError(_USAGE)
    for part in parts:
        counted = _EVENTS.match(part)
        if counted is not None:
            if events is not None:
                raise ValueError(f"the event count is given twice; {_USAGE}")
            events = int(counted.group(1))
            if events < MIN_EVENTS:
                raise ValueError(f"at least {MIN_EVENTS} events, not {events}")
            continue
        if time is not None:
            raise ValueError(f"the duration is given twice; {_USAGE}")
        try:
            time = parse_duration(part)
        except ValueError:
            raise ValueError(f"{part!r} is neither a duration nor `N events`; {_USAGE}") from None
        if time <= timedelta(0):
            raise ValueError("the duration must be positive")
    return ContinueAfter(time, events)


_USAGE = "give a duration (`1h`), an event count (`5000 events`), or both (`1h or 5000 events`)"


def recorded(history: Sequence[Event], completed_id: int | None) -> bool:
    """Whether the decision task that completed at `completed_id` decided
    ContinueAsNew (whether the service took it or refused it)."""
    if completed_id is None:
        return False
    for e in history:
        if e.get("decider_completed_event_id") != completed_id:
            continue
        if e.type == "WorkflowContinuedAsNew" or (
            e.type == "WorkflowCloseFailed" and e.get("decision_type") == "ContinueAsNew"
        ):
            return True
    return False


class Continuation:
    """The run's continue-as-new: when it is due, the gate where the workflow
    parks, and what the new run is given."""

    def __init__(self, run: Run, after: ContinueAfter | None) -> None:
        self.run = run
        self.after = after
        self.top: Frame | None = None
        """The workflow's own frame (the only one that parks)."""
        self.suggested = False
        """The current task is due (set by the interpreter for each task)."""
        self.events = 0
        """The history length at the current task's DeciderStarted."""
        self.started_at: datetime | None = None
        self.deadline: datetime | None = None
        """When the workflow's `timeout` runs out, if it has one."""
        self.parked: tuple[int, Future] | None = None
        """(step index, the future it waits on) once the workflow parked."""
        self.count = 0
        """How many runs before this one the workflow continued from."""

    # -- when ---------------------------------------------------------------------------

    def due(self) -> bool:
        """Whether the task being decided continues (at its first safe point)."""
        if self.suggested:
            return True
        after = self.after
        if after is None:
            return False
        if after.events is not None and self.events >= after.events:
            return True
        now, began = self.run.ops.now, self.started_at
        return after.time is not None and began is not None and now - began >= after.time

    def gate(self, frame: Frame, index: int) -> Future | None:
        """At the start of the workflow's step `index`: the future to wait on
        when the run continues here, else None (go on)."""
        if frame is not self.top or not frame.visits or self.parked is not None:
            return None
        if not self.due() or self.run.ops.outstanding(self._own_timers()):
            return None
        future = Future(on_cancel=self._unpark)
        self.parked = (index, future)
        return future

    def _unpark(self) -> None:
        self.parked = None

    def _own_timers(self) -> set[str]:
        """The workflow's `timeout` timer, which the new run takes over."""
        prefix = self.top.path if self.top is not None else ""
        return {f"{prefix}workflow:timeout"}

    # -- what goes on -------------------------------------------------------------------

    def decision(self) -> Decision:
        """The ContinueAsNew of a parked workflow."""
        assert self.parked is not None and self.top is not None
        index, _ = self.parked
        top, run = self.top, self.run
        doc: dict[str, Any] = {
            "count": self.count + 1,
            "input": run.input,
            "index": index,
            "variables": top.variables,
            "previous_output": top.previous_output,
            "marks": sorted(top.marks),
            "last_point": top.last_point,
            "entries": {
                str(i): {
                    "key": e.key,
                    "variables": e.variables,
                    "input": e.input,
                    "previous_output": e.previous_output,
                }
                for i, e in sorted(top.entries.items())
                if i in top.marks
            },
            "step_records": run.step_records,
            "retry_records": {
                k: [t.isoformat() for t in times] for k, times in run.retry_records.items()
            },
            "automatic_replays": run.automatic_replays,
            "signals": run.ops.unclaimed_signals(),
            "deadline": self.deadline.isoformat() if self.deadline is not None else None,
        }
        return Decision(
            "ContinueAsNew",
            {
                "input": {CONTINUATION_KEY: copy.deepcopy(doc)},
                "workflow_type": "",
                "version": "",
                "task_list": "",
                "execution_timeout": None,
                "decider_timeout": None,
                "carried_locks": sorted(run.ops.held),
            },
        )


def carried(given: Any) -> dict[str, Any] | None:
    """What a continued run's input carries, or None for a run started afresh."""
    if isinstance(given, dict) and set(given) == {CONTINUATION_KEY}:
        doc = given[CONTINUATION_KEY]
        if isinstance(doc, dict):
            return doc
    return None


def restore(doc: dict[str, Any], cont: Continuation, top: Frame) -> int:
    """Set the new run's fresh workflow frame up as the old run left it; the
    step to start at."""
    run = top.run
    index = doc.get("index")
    if not isinstance(index, int) or not 0 <= index < len(top.steps):
        raise StepError("ContinuationError", f"the continued run names step {index!r}")
    cont.count = int(doc.get("count") or 0)
    top.variables.clear()
    top.variables.update(copy.deepcopy(doc.get("variables") or {}))
    top.previous_output = copy.deepcopy(doc.get("previous_output"))
    top.marks = set(doc.get("marks") or ())
    top.last_point = doc.get("last_point")
    for i, e in (doc.get("entries") or {}).items():
        top.entries[int(i)] = Entry(
            str(e["key"]), dict(e["variables"]), dict(e["input"]), e.get("previous_output")
        )
    run.step_records.update(copy.deepcopy(doc.get("step_records") or {}))
    for key, times in (doc.get("retry_records") or {}).items():
        run.retry_records[key] = [datetime.fromisoformat(t) for t in times]
    run.automatic_replays.update(doc.get("automatic_replays") or {})
    deadline = doc.get("deadline")
    cont.deadline = datetime.fromisoformat(deadline) if deadline else None
    return index

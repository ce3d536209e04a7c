"""Operator replays (`weft replay`, STEPS.md "Replay"). Where to go is the step
interpreter's business: it resolves the point from the history before asking,
and reads it back from the ReplayRequested event. The service only records the
request: in the open run itself, or, for a run that ended badly, at the start
of a new run of the same workflow id."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import history_pb2 as h

from .errors import FailedPrecondition, InvalidArgument
from .start import StartCommand, start_workflow
from .tokens import check_open
from .transition import Transition

MODES = ("resuming", "from", "from_start", "last")
REPLAYABLE_CLOSES = ("failed", "timed_out", "canceled", "terminated")


@dataclass(frozen=True)
class ReplayRequest:
    mode: str
    step: str
    force: bool
    identity: str
    reason: str
    point: c.Payload | None

    def check(self) -> None:
        if self.mode not in MODES:
            raise InvalidArgument(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if (self.mode == "from") != bool(self.step):
            raise InvalidArgument("a step is given with mode 'from', and only then")

    def event(self, replay_of_run_id: str = "") -> h.ReplayRequestedAttributes:
        attrs = h.ReplayRequestedAttributes(
            mode=self.mode,
            step=self.step,
            force=self.force,
            identity=self.identity,
            reason=self.reason,
            replay_of_run_id=replay_of_run_id,
        )
        if self.point is not None:
            attrs.point.CopyFrom(self.point)
        return attrs


def replay_in_place(t: Transition, req: ReplayRequest) -> None:
    check_open(t.state)
    t.emit(req.event())


def check_point(point: c.Payload | None) -> None:
    """The point must be what `workers.steps.replay.resolve` makes: a JSON object
    with the step `index` and whether to `resume` (the rest the interpreter reads)."""
    try:
        doc = json.loads(point.data) if point is not None and point.data else None
    except ValueError:
        doc = None
    index = doc.get("index") if isinstance(doc, dict) else None
    if (
        not isinstance(doc, dict)
        or not isinstance(index, int)
        or isinstance(index, bool)
        or index < 0
        or not isinstance(doc.get("resume"), bool)
    ):
        raise InvalidArgument(
            "point must be a JSON object with a step `index` (>= 0) and `resume`:"
            " the replay point resolved from the run's history (workers.steps.replay.resolve;"
            " `weft replay` does it)"
        )


def check_replayable(status: str) -> None:
    """Only open runs, or runs that ended badly, are replayed."""
    if status != "open" and status not in REPLAYABLE_CLOSES:
        raise FailedPrecondition(
            f"a run that {status.replace('_', ' ')} is not replayed:"
            " only failed, timed out, canceled or terminated runs are"
        )


def check_step_workflow(workflow_id: str, started: h.WorkflowStartedAttributes) -> None:
    """Only step workflows replay: the interpreter resolves the point and reads it
    back, and a run started with a definition is one."""
    if not started.definition:
        raise FailedPrecondition(
            f"workflow {workflow_id!r} is not a step workflow: only those replay"
        )


def replay_as_new_run(
    t: Transition, old: h.WorkflowStartedAttributes, old_run_id: str, req: ReplayRequest
) -> None:
    """Open the run that replays `old_run_id`: its start as the old one's, then the request."""
    start_workflow(
        t,
        StartCommand(
            type_name=old.workflow_type.name,
            type_version=old.workflow_type.version,
            task_list=old.task_list,
            input=old.input if old.HasField("input") else None,
            execution_timeout=old.execution_timeout.ToTimedelta().total_seconds(),
            decider_timeout=old.decider_timeout.ToTimedelta().total_seconds(),
            identity=req.identity,
            definition=old.definition,
            replay_of_run_id=old_run_id,
        ),
    )
    t.emit(req.event(replay_of_run_id=old_run_id))

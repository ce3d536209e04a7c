"""Starting a run: WorkflowStarted, then DeciderScheduled."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import history_pb2 as h

from .state import RunKey, RunState
from .transition import Transition, apply, duration

# The version a workflow type has when it names none: a step definition without
# `version:` (STEPS.md), and the one a start naming no version falls back to.
# The step interpreter, which may not import the server, keeps a copy
# (workers/steps/model.py DEFAULT_VERSION), held equal by a test.
DEFAULT_VERSION = "1"


@dataclass(frozen=True)
class StartCommand:
    type_name: str
    type_version: str
    task_list: str
    input: c.Payload | None
    execution_timeout: float
    decider_timeout: float
    identity: str = ""
    continued_from_run_id: str = ""
    definition: str = ""
    """The type's registered definition, snapshotted into the run (read by the caller)."""
    parent_workflow_id: str = ""
    parent_run_id: str = ""
    parent_started_id: int = 0
    replay_of_run_id: str = ""
    carried_locks: tuple[h.CarriedLock, ...] = field(default_factory=tuple)
    """Locks taken over from the run this one continues (continue-as-new)."""
    retention: str = ""
    retention_hash: str = ""
    """The retention of the run this one continues ("": the default)."""


def start_workflow(t: Transition, cmd: StartCommand) -> None:
    attrs = h.WorkflowStartedAttributes(
        workflow_type=c.WorkflowType(name=cmd.type_name, version=cmd.type_version),
        task_list=cmd.task_list,
        execution_timeout=duration(cmd.execution_timeout),
        decider_timeout=duration(cmd.decider_timeout),
        identity=cmd.identity,
        continued_from_run_id=cmd.continued_from_run_id,
        definition=cmd.definition,
        parent_workflow_id=cmd.parent_workflow_id,
        parent_run_id=cmd.parent_run_id,
        parent_started_event_id=cmd.parent_started_id,
        replay_of_run_id=cmd.replay_of_run_id,
        carried_locks=cmd.carried_locks,
        retention=cmd.retention,
        retention_hash=cmd.retention_hash,
    )
    if cmd.input is not None:
        attrs.input.CopyFrom(cmd.input)
    t.emit(attrs)
    t.wake_decider()


def opened_run(key: RunKey, now: datetime, cmd: StartCommand) -> Transition:
    """The transition that opens a run besides the one a command acts on (a child,
    the run a continue-as-new goes on in): the store writes it with that command."""
    t = Transition(RunState.blank(key), now)
    apply(t, lambda new: start_workflow(new, cmd))
    return t

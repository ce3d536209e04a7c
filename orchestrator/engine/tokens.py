"""What a task token names. Signing and encoding live in the api layer."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import FailedPrecondition
from .state import RunKey, RunState


@dataclass(frozen=True)
class TaskToken:
    key: RunKey
    kind: str
    scheduled_id: int
    started_id: int
    attempt: int = 1
    """Of a decision task: a retried attempt reuses its DeciderStarted."""
    task_list: str = ""
    """The list the task was polled from: a worker's grant may be narrowed to lists."""


def check_open(state: RunState) -> None:
    if not state.is_open:
        raise FailedPrecondition(
            f"workflow {state.workflow_id!r} run {state.run_id} is already closed ({state.status})"
        )

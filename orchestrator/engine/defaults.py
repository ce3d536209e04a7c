"""Where a run's and an activity's settings come from when a request leaves them
out: SWF's precedence, the request first, then what the type was registered
with, then the server's default (or, for a task list, the run's own). Starts,
children and scheduled activities all choose through `first_given`; what a type
was registered with travels as `RegisteredWorkflowType` / `RegisteredActivityType`,
made once from the database row by the store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from .errors import InvalidArgument
from .limits import Defaults
from .start import DEFAULT_VERSION

V = TypeVar("V")


@dataclass(frozen=True)
class RegisteredWorkflowType:
    """What a start takes from its type's registration (seconds; None: not set).
    For a type nobody registered, one with only the version the start named."""

    version: str = ""
    task_list: str = ""
    execution_timeout: float | None = None
    decider_timeout: float | None = None
    definition: str = ""


@dataclass(frozen=True)
class RegisteredActivityType:
    """Defaults of a registered activity type (seconds; None: not set)."""

    task_list: str = ""
    schedule_to_start: float | None = None
    start_to_close: float | None = None
    schedule_to_close: float | None = None
    heartbeat: float | None = None


def first_given(request: V | None, registered: V | None, fallback: V) -> V:
    """The precedence rule: the request's value if it gives one, else the
    registered type's, else the fallback. None and "" mean "not given"."""
    for value in (request, registered):
        if value is not None and value != "":
            return value
    return fallback


def type_candidates(name: str, version: str) -> list[tuple[str, str]]:
    """The registrations a start naming (name, version) may mean, best first. An
    empty version is the type registered without one, failing that the one
    registered as DEFAULT_VERSION, the version a step definition has when it
    names none (so `weft start NAME` reaches a registered definition)."""
    return [(name, version)] if version else [(name, ""), (name, DEFAULT_VERSION)]


def chosen_type(
    found: Mapping[tuple[str, str], RegisteredWorkflowType], name: str, version: str
) -> RegisteredWorkflowType:
    """The registration a start means, of those `type_candidates` found; its
    `version` is the one the run records (the named one if none was found)."""
    for key in type_candidates(name, version):
        if key in found:
            return found[key]
    return RegisteredWorkflowType(version=version)


def start_task_list(registered: RegisteredWorkflowType, requested: str, inherited: str = "") -> str:
    """A new run's task list: the request's (a start or a child decision), else its
    type's registered default, else (a child) its parent's. A start with none
    anywhere is refused."""
    chosen = first_given(requested, registered.task_list, inherited)
    if not chosen:
        raise InvalidArgument("task_list is required (the workflow type has no registered default)")
    return chosen


def start_timeouts(
    registered: RegisteredWorkflowType,
    defaults: Defaults,
    execution_timeout: float | None,
    decider_timeout: float | None,
) -> tuple[float, float]:
    """A new run's (execution, decider) timeouts: the request's, else its type's
    registered defaults, else the server's."""
    return (
        first_given(execution_timeout, registered.execution_timeout, defaults.execution_timeout),
        first_given(decider_timeout, registered.decider_timeout, defaults.decider_timeout),
    )

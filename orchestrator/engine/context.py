"""What a decision needs to know beyond its run: limits, defaults, and what
the caller read of other runs and registrations beforehand (the engine does
no I/O). Its own module so that the decision and child rules both take it
without importing each other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .defaults import RegisteredActivityType, RegisteredWorkflowType
from .limits import Defaults, Limits


@dataclass(frozen=True)
class DecisionContext:
    limits: Limits = field(default_factory=Limits)
    defaults: Defaults = field(default_factory=Defaults)
    activity_types: Mapping[tuple[str, str], RegisteredActivityType] = field(default_factory=dict)
    """Registrations of the activity types ScheduleActivity decisions name."""
    new_run_id: str = ""
    """The run id a ContinueAsNew decision opens (chosen by the caller: the engine has no I/O)."""
    new_run_definition: str = ""
    """The registered definition of the type a ContinueAsNew decision continues as
    (read by the caller), snapshotted into the new run like a start's."""
    child_types: Mapping[tuple[str, str], RegisteredWorkflowType] = field(default_factory=dict)
    """Registrations of the types StartChildWorkflow decisions name."""
    child_run_ids: Mapping[str, str] = field(default_factory=dict)
    """A new run id for each workflow id a StartChildWorkflow decision names."""
    open_workflows: frozenset[str] = frozenset()
    """Which of those workflow ids have an open run already."""
    signal_targets: Mapping[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    """(workflow id, run id) of each SignalExternalWorkflow -> (the open run it
    reaches, "") or ("", why it cannot: UNKNOWN_EXTERNAL_WORKFLOW, SIGNAL_LIMIT_EXCEEDED)."""

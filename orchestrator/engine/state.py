"""The mutable state of one run: everything the engine needs without reading history.

It is a fold of the history (`events.evolve`), stored as JSON on the run row and
always written in the same transaction as the events it derives from. The one
exception is heartbeat bookkeeping: heartbeats are not events (CONTRACT.md), so
`last_heartbeat_at`/`heartbeat_details` live only here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

OPEN = "open"
CLOSED_STATUSES = ("completed", "failed", "canceled", "terminated", "continued_as_new", "timed_out")


@dataclass(frozen=True)
class RunKey:
    namespace: str
    workflow_id: str
    run_id: str


# The failure cause of a decision task that timed out (its attempts: decider_attempts.py).
DECIDER_TIMEOUT = "TIMEOUT"


@dataclass
class DeciderState:
    scheduled_id: int = 0
    """A DeciderScheduled not yet handed out (0: none). At most one."""
    started_id: int = 0
    """The DeciderStarted of the decision task in progress (0: none)."""
    started_scheduled_id: int = 0
    started_at: float = 0.0
    previous_started_id: int = 0
    """The DeciderStarted of the last decision task that completed."""
    attempt: int = 1
    """Of the decision task scheduled or started: 1, then one more per failure or
    timeout in a row, back to 1 when a task completes."""
    # A decision task that fails again after a recorded failure is retried
    # without appending events (Temporal's "transient" workflow task), after a
    # backoff: a broken decider costs one task per backoff, not three events per
    # timeout. What follows lives only here, not in the history.
    retry_pending: bool = False
    """The started task failed or timed out again; it is handed out anew (same
    DeciderStarted, next attempt) once the backoff is over."""
    backoff_until: float = 0.0
    attempt_started_at: float = 0.0
    """When a retried attempt was handed out (its start-to-close runs from here)."""
    failure_cause: str = ""
    """Why the last attempt failed (DECIDER_TIMEOUT, or the decider's cause), for describe."""
    failure_message: str = ""
    cached_by: str = ""
    """The cache of the decider that completed the last decision task, if it
    keeps one: it holds the history up to `previous_started_id`."""
    started_session: str = ""
    """The worker session of the decider that has the started task ("" for
    none): a retried attempt appends no DeciderStarted, so it lives here."""


_OUTSIDE_HISTORY = (
    "attempt",
    "retry_pending",
    "backoff_until",
    "attempt_started_at",
    "failure_cause",
    "failure_message",
    "cached_by",
    "started_session",
)
_DECIDER_DEFAULTS = asdict(DeciderState())


def _fields_of(value: Any) -> dict[str, Any]:
    fields_: dict[str, Any] = value.__dict__
    return fields_


@dataclass
class ActivityState:
    activity_id: str
    type_name: str
    type_version: str
    task_list: str
    scheduled_id: int
    scheduled_at: float
    schedule_to_start: float | None
    start_to_close: float | None
    schedule_to_close: float | None
    heartbeat: float | None
    started_id: int = 0
    started_at: float = 0.0
    identity: str = ""
    principal: str = ""
    """Who started it, as the server authenticated them (its ActivityStarted's)."""
    session: str = ""
    """The worker session of the runner that started it (its ActivityStarted's)."""
    cancel_requested_id: int = 0
    last_heartbeat_at: float = 0.0
    heartbeat_details: str = ""
    """Base64 of the serialized Payload of the latest heartbeat (not in history)."""


@dataclass
class TimerState:
    timer_id: str
    started_id: int
    fire_at: float


@dataclass
class LockState:
    """A lock the run asked for: waiting until `acquired_id` is set, then held."""

    lock_name: str
    requested_id: int
    requested_at: float
    acquired_id: int = 0
    acquired_at: float = 0.0

    @property
    def held(self) -> bool:
        return bool(self.acquired_id)


@dataclass
class ChildState:
    """An open child workflow this run started."""

    workflow_id: str
    run_id: str
    """Its first run (a child that continues as new keeps its workflow id)."""
    started_id: int
    """This run's ChildWorkflowStarted."""
    parent_close_policy: str
    """"terminate", "request_cancel" or "abandon"."""


@dataclass
class RunState:
    namespace: str
    workflow_id: str
    run_id: str
    type_name: str = ""
    type_version: str = ""
    task_list: str = ""
    status: str = OPEN
    next_event_id: int = 1
    started_at: float = 0.0
    closed_at: float = 0.0
    execution_timeout: float = 0.0
    decider_timeout: float = 0.0
    continued_from_run_id: str = ""
    continued_as_new_run_id: str = ""
    cancel_requested: bool = False
    signals: int = 0
    decider: DeciderState = field(default_factory=DeciderState)
    activities: dict[str, ActivityState] = field(default_factory=dict)
    timers: dict[str, TimerState] = field(default_factory=dict)
    locks: dict[str, LockState] = field(default_factory=dict)
    """Held and awaited locks by name (the service's lock rows derive from them)."""
    children: dict[str, ChildState] = field(default_factory=dict)
    """Open child workflows by workflow id."""
    parent_workflow_id: str = ""
    parent_run_id: str = ""
    parent_started_id: int = 0
    replay_of_run_id: str = ""
    started_by: str = ""
    """The principal of WorkflowStarted ("" without authentication)."""
    retention: str = "parent"
    """The run's retention policy (`context` already substituted), set by a
    Marker named `retention`; `retention_hash` names its group ("": its type)."""
    retention_hash: str = ""

    @classmethod
    def blank(cls, key: RunKey) -> RunState:
        return cls(namespace=key.namespace, workflow_id=key.workflow_id, run_id=key.run_id)

    @property
    def key(self) -> RunKey:
        return RunKey(self.namespace, self.workflow_id, self.run_id)

    @property
    def is_open(self) -> bool:
        return self.status == OPEN

    def activity_by_scheduled_id(self, scheduled_id: int) -> ActivityState | None:
        for act in self.activities.values():
            if act.scheduled_id == scheduled_id:
                return act
        return None

    def to_json(self) -> str:
        # Each nested dataclass as its own __dict__: the same document as
        # `asdict`, several times faster (this is written on every transition).
        return json.dumps(self, default=_fields_of, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunState:
        raw: dict[str, Any] = json.loads(text)
        raw["decider"] = DeciderState(**raw["decider"])
        raw["activities"] = {k: ActivityState(**v) for k, v in raw["activities"].items()}
        raw["timers"] = {k: TimerState(**v) for k, v in raw["timers"].items()}
        # Runs stored before locks existed have none.
        raw["locks"] = {k: LockState(**v) for k, v in raw.get("locks", {}).items()}
        raw["children"] = {k: ChildState(**v) for k, v in raw.get("children", {}).items()}
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

    def folded_part(self) -> dict[str, Any]:
        """The part of the state that the history alone determines: without
        heartbeats and retried decision-task attempts, which append no events."""
        data = asdict(self)
        for act in data["activities"].values():
            act["last_heartbeat_at"] = 0.0
            act["heartbeat_details"] = ""
        decider = data["decider"]
        for name in _OUTSIDE_HISTORY:
            decider[name] = _DECIDER_DEFAULTS[name]
        return data

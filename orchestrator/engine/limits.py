"""Per-run limits (CONTRACT.md "Limits"); configurable, these are the defaults."""

from __future__ import annotations

from dataclasses import dataclass

# A registered workflow definition (step YAML) is copied into the WorkflowStarted
# of every run: as large as a default payload, whatever the payload limit is set
# to (a definition registered under one setting must stay valid under another).
MAX_DEFINITION_BYTES = 256 * 1024
# What the heartbeat details of a run's pending activities may total, serialized.
# Each is bounded by the payload limit, but a run may hold 1,000 (up to 10,000)
# pending activities and its state, details included, is written whole on every
# transition: unbounded, one run's workers could make each of its transitions
# write hundreds of megabytes and stall the node for every other run. Twice the
# largest payload an operator may allow, so a heartbeat of any allowed size fits
# in a run that holds no others.
HEARTBEAT_DETAILS_PER_RUN = 4 * 1024 * 1024
# From this share of the event limit on, decision tasks suggest continue-as-new:
# it leaves room to finish the current step.
SUGGEST_CONTINUE = 0.9


@dataclass(frozen=True)
class Limits:
    payload_bytes: int = 256 * 1024
    payload_depth: int = 100
    """How deep a JSON payload may nest arrays and objects."""
    definition_bytes: int = MAX_DEFINITION_BYTES
    events_per_run: int = 50_000
    pending_activities: int = 1_000
    pending_timers: int = 1_000
    signals_per_run: int = 10_000
    id_length: int = 1_000

    def suggests_continue_as_new(self, history_length: int) -> bool:
        """Whether a decision task at this history length sets
        `continue_as_new_suggested` (CONTRACT "Limits")."""
        return history_length >= SUGGEST_CONTINUE * self.events_per_run


# What an operator may set each limit to (`weft server --max-…`). A payload
# leaves room for a failure's details (the SDK keeps a traceback to 16,000
# characters), and an event (a WorkflowStarted with an input and a definition)
# stays under the 4 MiB a gRPC client receives by default (`api.common`);
# Temporal's default limit on a payload is 2 MB too.
SETTABLE = {
    "payload_bytes": (64 * 1024, 2 * 1024 * 1024),
    "events_per_run": (1_000, 1_000_000),
    # (A pending activity keeps its last heartbeat's details in the run's state.)
    "pending_activities": (1, 10_000),
    "pending_timers": (1, 10_000),
    "signals_per_run": (1, 1_000_000),
}


@dataclass(frozen=True)
class Defaults:
    """Timeouts applied when neither the request nor a registered type gives one (seconds)."""

    execution_timeout: float = 365 * 24 * 3600.0
    decider_timeout: float = 10.0
    activity_start_to_close: float = 300.0

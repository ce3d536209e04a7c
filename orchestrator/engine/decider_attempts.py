"""Decision tasks that fail in a row.

The first failure or timeout of a decision task is recorded (`DeciderFailed`,
`DeciderTimedOut`) and the task is scheduled again at once, which cures a
passing fault. Each later failure in a row appends nothing: the same task is
handed out again, as its next attempt, after a backoff that doubles up to a
minute (Temporal's "transient" workflow task). A run whose decider cannot
decide it then costs one task per backoff instead of filling its history,
and `describe` shows the attempt and why it failed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .state import DECIDER_TIMEOUT

if TYPE_CHECKING:
    from .transition import Transition

TIMEOUT = DECIDER_TIMEOUT
MAX_BACKOFF = 60.0
_MESSAGE_CHARS = 500


def backoff(attempt: int) -> float:
    """Seconds before attempt `attempt` (3 or more) is handed out: 1, 2, 4 … 60."""
    return min(MAX_BACKOFF, 2.0 ** max(0, attempt - 3))


def retried_quietly(t: Transition) -> bool:
    """Whether a failure of the started task appends nothing (it is not the first in a row)."""
    return t.state.decider.attempt >= 2


def park(t: Transition, cause: str, message: str) -> None:
    """The started task failed again: hand it out anew after a backoff, appending nothing."""
    d = t.state.decider
    d.retry_pending = True
    d.attempt += 1
    d.backoff_until = t.now.timestamp() + backoff(d.attempt)
    d.attempt_started_at = 0.0
    d.failure_cause = cause
    d.failure_message = message[:_MESSAGE_CHARS]
    t.state_changed = True


def hand_out_again(t: Transition) -> int:
    """Start the parked task again on its old DeciderStarted; its id."""
    d = t.state.decider
    d.retry_pending = False
    d.attempt_started_at = t.now.timestamp()
    t.state_changed = True
    return d.started_id


def details_message(data: bytes) -> str:
    """The `message` of a failure's JSON details (as the SDK writes them), if any."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return ""
    message = doc.get("message") if isinstance(doc, dict) else None
    return message if isinstance(message, str) else ""

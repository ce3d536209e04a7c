"""Registered workflow and activity types, as this node last read them.

Every decision that schedules an activity, and every start, needs its type's
registered defaults; reading them from the database each time cost a
transaction per decision task. They change only when someone registers a type:
this node forgets a namespace's types when it registers one itself, and when
another node says it did (a notification on PostgreSQL); a type not registered
is remembered as such too. As a last resort against a lost notification, what
is held is dropped after `MAX_AGE` seconds.
"""

from __future__ import annotations

import time
from typing import Any

from orchestrator.engine.defaults import RegisteredActivityType, RegisteredWorkflowType

MAX_AGE = 60.0
MAX_ENTRIES = 50_000

Key = tuple[str, str, str, str]  # (kind, namespace, name, version)
Registered = RegisteredWorkflowType | RegisteredActivityType


def workflow_type_of(row: Any) -> RegisteredWorkflowType:
    """A `workflow_types` row as the engine takes it."""
    return RegisteredWorkflowType(
        version=row.version,
        task_list=row.default_task_list or "",
        execution_timeout=row.default_execution_timeout,
        decider_timeout=row.default_decider_timeout,
        definition=row.definition or "",
    )


def activity_type_of(row: Any) -> RegisteredActivityType:
    """An `activity_types` row as the engine takes it."""
    return RegisteredActivityType(
        task_list=row.default_task_list or "",
        schedule_to_start=row.default_schedule_to_start,
        start_to_close=row.default_start_to_close,
        schedule_to_close=row.default_schedule_to_close,
        heartbeat=row.default_heartbeat,
    )


class TypeCache:
    def __init__(self) -> None:
        self._rows: dict[Key, tuple[float, Registered | None]] = {}

    def get(self, key: Key) -> tuple[bool, Registered | None]:
        """(known, registration): known is False when the database must be asked."""
        held = self._rows.get(key)
        if held is None or time.monotonic() - held[0] > MAX_AGE:
            return False, None
        return True, held[1]

    def put(self, key: Key, row: Registered | None) -> None:
        if len(self._rows) >= MAX_ENTRIES:
            self._rows.clear()  # rare: a node that saw this many types starts over
        self._rows[key] = (time.monotonic(), row)

    def clear(self) -> None:
        self._rows.clear()

    def forget(self, namespace: str) -> None:
        """A type of the namespace was registered: read its types anew."""
        for key in [k for k in self._rows if k[1] == namespace]:
            del self._rows[key]

"""Locks: a run's decisions to take and give back a named lock, and the two
commands that come from outside the run (a grant, an operator's force-release).

Which run gets a lock is not decided here: the engine sees one run at a time.
The store keeps one holder row and a queue of waiter rows per lock, derived
from the runs' states like task rows, and when a lock falls free in a
transaction it grants it, in the same transaction, to the oldest waiter by
applying `grant` to that run.
"""

from __future__ import annotations

from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h

from .errors import FailedPrecondition
from .tokens import check_open
from .transition import Transition

MAX_LOCK_NAME = 255


def request_lock(t: Transition, a: d.RequestLockDecision, completed: int, _ctx: object) -> None:
    lock = t.state.locks.get(a.lock_name)
    if lock is not None:
        t.emit(
            h.RequestLockFailedAttributes(
                lock_name=a.lock_name,
                cause="LOCK_ALREADY_HELD" if lock.held else "LOCK_ALREADY_REQUESTED",
                decider_completed_event_id=completed,
            )
        )
        return
    t.emit(h.LockRequestedAttributes(lock_name=a.lock_name, decider_completed_event_id=completed))


def release_lock(t: Transition, a: d.ReleaseLockDecision, completed: int, _ctx: object) -> None:
    lock = t.state.locks.get(a.lock_name)
    if lock is None:
        t.emit(
            h.ReleaseLockFailedAttributes(
                lock_name=a.lock_name, cause="LOCK_NOT_HELD", decider_completed_event_id=completed
            )
        )
        return
    t.emit(
        h.LockReleasedAttributes(
            lock_name=a.lock_name, decider_completed_event_id=completed, was_waiting=not lock.held
        )
    )


def grant(t: Transition, lock_name: str, previous_workflow_id: str, previous_run_id: str) -> None:
    """The store found `lock_name` free and this run first in its queue."""
    check_open(t.state)
    lock = t.state.locks.get(lock_name)
    if lock is None or lock.held:
        raise AssertionError(f"run {t.state.run_id} does not wait for lock {lock_name!r}")
    t.emit(
        h.LockAcquiredAttributes(
            lock_name=lock_name,
            requested_event_id=lock.requested_id,
            previous_holder_workflow_id=previous_workflow_id,
            previous_holder_run_id=previous_run_id,
        )
    )


def force_release(t: Transition, lock_name: str, identity: str, reason: str) -> None:
    """An operator takes the lock from its holder; the holder's history says who."""
    check_open(t.state)
    lock = t.state.locks.get(lock_name)
    if lock is None or not lock.held:
        raise FailedPrecondition(f"run {t.state.run_id} no longer holds lock {lock_name!r}")
    t.emit(
        h.LockReleasedAttributes(lock_name=lock_name, forced=True, identity=identity, reason=reason)
    )

"""Locks, one run at a time (engine/locks.py, STEPS.md "Locks"): a run's
RequestLock and ReleaseLock decisions, the grant the store applies to the first
waiter, an operator's force-release, and what a close and a continue-as-new do
with the locks a run has. Which run is granted a lock, and when, is the store's
business (tests/e2e/test_locks.py, test_carried_locks.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator.engine import derived
from orchestrator.engine.errors import FailedPrecondition, InvalidArgument
from orchestrator.engine.events import fold
from orchestrator.engine.locks import MAX_LOCK_NAME
from orchestrator.engine.state import LockState
from sdk.api.weft.v1 import decisions_pb2 as d

from .builder import (
    T0,
    Run,
    complete_workflow,
    continue_as_new,
    release_lock,
    request_lock,
    started,
)
from .decider_turns import decider_turn


def holding(name: str = "L") -> Run:
    """A run that asked for `name` and was granted it (the lock was free)."""
    run = started()
    run.step(request_lock(name))
    return run.grant(name)


def waiting(name: str = "L") -> Run:
    """A run that asked for `name` and waits for it."""
    run = started()
    run.step(request_lock(name))
    return run


def withdrawn(name: str = "L") -> Run:
    """A run that asked for `name`, then gave up waiting for it."""
    run = waiting(name)
    run.decide(decider_turn(run), release_lock(name))
    return run


# --- requested, then granted --------------------------------------------------


def test_a_request_waits_quietly_until_the_grant_wakes_the_decider() -> None:
    run = started()
    run.advance(5).step(request_lock("L"))
    # LockRequested is no trigger: a waiting run has nothing for its decider.
    assert run.last_types == ["DeciderCompleted", "LockRequested"]
    requested = run.history[-1]
    assert requested.lock_requested.lock_name == "L"
    assert requested.lock_requested.decider_completed_event_id == requested.event_id - 1
    assert run.state.locks == {
        "L": LockState(
            lock_name="L", requested_id=requested.event_id, requested_at=T0.timestamp() + 5
        )
    }
    assert not run.state.locks["L"].held
    assert run.decision_tasks() == []

    run.advance(30).grant("L", "wf-0", "run-0")
    assert run.last_types == ["LockAcquired", "DeciderScheduled"]
    event = run.history[-2]
    acquired = event.lock_acquired
    assert (
        acquired.lock_name,
        acquired.requested_event_id,
        acquired.previous_holder_workflow_id,
        acquired.previous_holder_run_id,
    ) == ("L", requested.event_id, "wf-0", "run-0")
    lock = run.state.locks["L"]
    assert lock.held
    assert (lock.requested_id, lock.acquired_id) == (requested.event_id, event.event_id)
    assert (lock.requested_at, lock.acquired_at) == (T0.timestamp() + 5, T0.timestamp() + 35)
    assert run.decision_tasks() == [event.event_id + 1]
    assert fold(run.key, run.history).folded_part() == run.state.folded_part()


def test_a_free_lock_names_no_previous_holder() -> None:
    run = holding("L")
    acquired = run.history[-2].lock_acquired
    assert (acquired.previous_holder_workflow_id, acquired.previous_holder_run_id) == ("", "")


def test_a_grant_while_the_decider_works_queues_one_decision_task() -> None:
    run = waiting("L")
    token = decider_turn(run)
    run.grant("L")
    assert run.last_types == ["LockAcquired", "DeciderScheduled"]
    # The decider answering now has not seen the grant: its close is refused.
    run.decide(token, complete_workflow())
    assert run.last_types == ["DeciderCompleted", "WorkflowCloseFailed"]
    assert run.history[-1].workflow_close_failed.cause == "UNHANDLED_EVENTS"
    assert run.state.locks["L"].held


def test_several_locks_are_held_and_awaited_independently() -> None:
    run = started()
    run.step(request_lock("a"), request_lock("b"), request_lock("c"))
    assert run.last_types == ["DeciderCompleted", *["LockRequested"] * 3]
    run.grant("b")
    assert {name: lock.held for name, lock in run.state.locks.items()} == {
        "a": False,
        "b": True,
        "c": False,
    }


GRANT_REFUSALS: list[tuple[str, Callable[[], Run], type[Exception]]] = [
    # id, the run, what a grant to it raises
    ("not-asked", started, AssertionError),
    ("already-held", holding, AssertionError),
    ("asked-for-another", lambda: waiting("other"), AssertionError),
    ("withdrawn", withdrawn, AssertionError),
    ("closed", lambda: waiting().terminate(), FailedPrecondition),
]


@pytest.mark.parametrize(
    ("make", "error"),
    [row[1:] for row in GRANT_REFUSALS],
    ids=[row[0] for row in GRANT_REFUSALS],
)
def test_a_grant_reaches_only_an_open_run_that_waits_for_the_lock(
    make: Callable[[], Run], error: type[Exception]
) -> None:
    run = make()
    with pytest.raises(error):
        run.grant("L")
    run.assert_refused_cleanly()


# --- what the decider may not do ------------------------------------------------

FAILURES: list[tuple[str, Callable[[], Run], list[d.Decision], list[str], list[str]]] = [
    # id, the run, the answer, events appended after DeciderCompleted, causes
    (
        "request-while-waiting",
        waiting,
        [request_lock("L")],
        ["RequestLockFailed", "DeciderScheduled"],
        ["LOCK_ALREADY_REQUESTED"],
    ),
    (
        "request-while-holding",
        holding,
        [request_lock("L")],
        ["RequestLockFailed", "DeciderScheduled"],
        ["LOCK_ALREADY_HELD"],
    ),
    (
        "request-twice-in-one-answer",
        started,
        [request_lock("L"), request_lock("L")],
        ["LockRequested", "RequestLockFailed", "DeciderScheduled"],
        ["LOCK_ALREADY_REQUESTED"],
    ),
    (
        "release-never-asked",
        started,
        [release_lock("L")],
        ["ReleaseLockFailed", "DeciderScheduled"],
        ["LOCK_NOT_HELD"],
    ),
    (
        "release-another",
        holding,
        [release_lock("M")],
        ["ReleaseLockFailed", "DeciderScheduled"],
        ["LOCK_NOT_HELD"],
    ),
    (
        "release-twice-in-one-answer",
        holding,
        [release_lock("L"), release_lock("L")],
        ["LockReleased", "ReleaseLockFailed", "DeciderScheduled"],
        ["LOCK_NOT_HELD"],
    ),
    (
        "release-after-a-force-release",
        lambda: holding().force_release("L"),
        [release_lock("L")],
        ["ReleaseLockFailed", "DeciderScheduled"],
        ["LOCK_NOT_HELD"],
    ),
]


@pytest.mark.parametrize(
    ("make", "decisions", "appended", "causes"),
    [row[1:] for row in FAILURES],
    ids=[row[0] for row in FAILURES],
)
def test_a_lock_decision_that_cannot_be_applied_fails_and_tells_the_decider(
    make: Callable[[], Run], decisions: list[d.Decision], appended: list[str], causes: list[str]
) -> None:
    run = make()
    before = {name: (lock.held, lock.requested_id) for name, lock in run.state.locks.items()}
    token = decider_turn(run)
    run.decide(token, *decisions)
    assert run.last_types == ["DeciderCompleted", *appended]
    assert run.last is not None
    completed = run.last.events[0].event_id
    failed = [e for e in run.last.events if e.type.endswith("LockFailed")]
    got = [
        getattr(
            e, "request_lock_failed" if e.type == "RequestLockFailed" else "release_lock_failed"
        )
        for e in failed
    ]
    assert [a.cause for a in got] == causes
    assert {a.decider_completed_event_id for a in got} == {completed}
    assert {a.lock_name for a in got} == {_name(decisions[-1])}
    # The failed decision changed nothing of the locks the run already had.
    if appended[0].endswith("LockFailed"):
        after = {name: (lock.held, lock.requested_id) for name, lock in run.state.locks.items()}
        assert after == before


def _name(decision: d.Decision) -> str:
    kind = decision.WhichOneof("attributes")
    assert kind in ("request_lock", "release_lock")
    name: str = getattr(decision, kind).lock_name
    return name


@pytest.mark.parametrize(
    "failing",
    [request_lock("L"), release_lock("M")],
    ids=["request-failed", "release-failed"],
)
def test_a_failed_lock_decision_refuses_a_close_in_the_same_answer(failing: d.Decision) -> None:
    run = holding("L")
    run.step(failing, complete_workflow())
    assert run.last_types[-3:] == [failing_type(failing), "WorkflowCloseFailed", "DeciderScheduled"]
    assert run.history[-2].workflow_close_failed.cause == "UNHANDLED_EVENTS"
    assert run.state.is_open and run.state.locks["L"].held


def failing_type(decision: d.Decision) -> str:
    return "RequestLockFailed" if decision.HasField("request_lock") else "ReleaseLockFailed"


BAD_NAMES = [
    ("empty", "", "lock_name is required"),
    ("too-long", "x" * (MAX_LOCK_NAME + 1), "longer than 255"),
    ("bell", "bell\x07", "control characters"),
    ("tab", "a\tb", "control characters"),
    ("newline", "a\n", "control characters"),
    ("delete", "del\x7f", "control characters"),
]


@pytest.mark.parametrize("decide", [request_lock, release_lock], ids=["request", "release"])
@pytest.mark.parametrize(
    ("name", "message"), [row[1:] for row in BAD_NAMES], ids=[row[0] for row in BAD_NAMES]
)
def test_a_bad_lock_name_refuses_the_whole_answer(
    decide: Callable[[str], d.Decision], name: str, message: str
) -> None:
    run = started()
    token = run.poll_decision()
    with pytest.raises(InvalidArgument, match=message):
        run.decide(token, request_lock("fine"), decide(name))
    run.assert_refused_cleanly()
    # The decision task is still the decider's to answer.
    run.decide(token, request_lock("fine"))
    assert run.last_types == ["DeciderCompleted", "LockRequested"]


def test_the_longest_lock_name_and_any_printable_one_are_taken() -> None:
    run = started()
    longest, odd = "x" * MAX_LOCK_NAME, "ünïcode/with spaces:{and}[marks]"
    run.step(request_lock(longest), request_lock(odd))
    assert set(run.state.locks) == {longest, odd}


def test_an_empty_carried_lock_name_refuses_the_answer() -> None:
    run = holding("L")
    token = run.poll_decision()
    with pytest.raises(InvalidArgument, match="carried_locks"):
        run.decide(token, continue_as_new(carried_locks=("L", "")))
    run.assert_refused_cleanly()


# --- released --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "was_waiting"), [(holding, False), (waiting, True)], ids=["held", "withdrawn"]
)
def test_the_decider_releases_a_held_lock_or_withdraws_a_request(
    make: Callable[[], Run], was_waiting: bool
) -> None:
    run = make()
    token = decider_turn(run)
    run.decide(token, release_lock("L"))
    # LockReleased is no trigger: the decider asked for it and knows.
    assert run.last_types == ["DeciderCompleted", "LockReleased"]
    released = run.history[-1].lock_released
    assert (released.lock_name, released.was_waiting, released.forced) == ("L", was_waiting, False)
    assert released.decider_completed_event_id == run.history[-2].event_id
    assert (released.identity, released.reason) == ("", "")
    assert run.state.locks == {}
    assert run.decision_tasks() == []
    assert fold(run.key, run.history).folded_part() == run.state.folded_part()


def test_a_request_withdrawn_in_the_same_answer_leaves_nothing() -> None:
    run = started()
    run.step(request_lock("L"), release_lock("L"))
    assert run.last_types == ["DeciderCompleted", "LockRequested", "LockReleased"]
    assert run.history[-1].lock_released.was_waiting
    assert run.state.locks == {}


def test_a_release_and_a_close_in_one_answer_close_the_run() -> None:
    run = holding("L")
    run.step(release_lock("L"), complete_workflow())
    assert run.last_types == ["DeciderCompleted", "LockReleased", "WorkflowSuccess"]


def test_an_operator_force_releases_a_held_lock_and_the_history_says_who() -> None:
    run = holding("L")
    run.step()  # the decider has seen the grant
    run.force_release("L", "ops@host", "stuck for a day")
    # Not a trigger (CONTRACT.md): the decider hears of it when it releases the lock.
    assert run.last_types == ["LockReleased"]
    released = run.history[-1].lock_released
    assert (released.forced, released.identity, released.reason) == (
        True,
        "ops@host",
        "stuck for a day",
    )
    assert (released.was_waiting, released.decider_completed_event_id) == (False, 0)
    assert run.state.locks == {}
    assert run.decision_tasks() == []


FORCE_REFUSALS: list[tuple[str, Callable[[], Run]]] = [
    ("not-asked", started),
    ("only-awaited", waiting),
    ("another-lock", lambda: holding("M")),
    ("already-forced", lambda: holding().force_release("L")),
    ("closed", lambda: holding().terminate()),
]


@pytest.mark.parametrize(
    "make", [row[1] for row in FORCE_REFUSALS], ids=[r[0] for r in FORCE_REFUSALS]
)
def test_only_a_held_lock_of_an_open_run_is_force_released(make: Callable[[], Run]) -> None:
    run = make()
    with pytest.raises(FailedPrecondition):
        run.force_release("L")
    run.assert_refused_cleanly()


# --- the close, and continue-as-new --------------------------------------------

CLOSES: list[tuple[str, Callable[[Run], object], str]] = [
    ("complete", lambda r: r.step(complete_workflow()), "completed"),
    ("terminate", lambda r: r.terminate(), "terminated"),
    ("timeout", lambda r: r.fire_when_due(derived.WORKFLOW_TIMEOUT, 1), "timed_out"),
    ("continue-as-new", lambda r: r.step(continue_as_new()), "continued_as_new"),
]


@pytest.mark.parametrize(
    ("close", "status"), [row[1:] for row in CLOSES], ids=[row[0] for row in CLOSES]
)
def test_every_close_lets_go_of_held_and_awaited_locks_without_a_release_event(
    close: Callable[[Run], object], status: str
) -> None:
    run = started()
    run.step(request_lock("held"), request_lock("awaited"))
    run.grant("held")
    close(run)
    assert run.state.status == status
    assert run.state.locks == {}
    assert "LockReleased" not in run.types
    assert fold(run.key, run.history).folded_part() == run.state.folded_part()
    # A run that continued as new carries no lock it was not told to.
    for new in run.new_runs:
        assert new.state.locks == {}


def test_the_run_a_lock_was_carried_to_holds_and_awaits_it_as_its_own() -> None:
    run = started()
    run.step(request_lock("held"), request_lock("awaited"))
    run.grant("held")
    run.step(continue_as_new(carried_locks=("held", "awaited")))
    nxt = Run.opened(run.new_runs[0])
    assert [e.type for e in nxt.history] == ["WorkflowStarted", "DeciderScheduled"]
    assert {name: lock.held for name, lock in nxt.state.locks.items()} == {
        "held": True,
        "awaited": False,
    }
    # The awaited lock is granted to the new run, as requested by its first event.
    nxt.grant("awaited", "wf-x", "run-x")
    assert nxt.last_types == ["LockAcquired"]  # its first decision task is still outstanding
    assert nxt.history[-1].lock_acquired.requested_event_id == 1
    # The decider of the new run may release what the old one held.
    nxt.step(release_lock("held"), request_lock("held"))
    assert nxt.last_types == ["DeciderCompleted", "LockReleased", "LockRequested"]
    assert nxt.history[-2].lock_released.was_waiting is False
    assert {name: lock.held for name, lock in nxt.state.locks.items()} == {
        "held": False,
        "awaited": True,
    }
    assert fold(nxt.key, nxt.history).folded_part() == nxt.state.folded_part()

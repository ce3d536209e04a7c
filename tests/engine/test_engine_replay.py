"""Operator replays, the service's half (engine/replay.py, STEPS.md "Replay"):
the request's checks (mode and step, the resolved point), which runs replay, an
open run's ReplayRequested, and the new run that replays a run that ended badly.
What the step interpreter does with the request: tests/steps; the API around
it (a step workflow only, replayed once): tests/e2e/test_replay_requests.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import pytest

from orchestrator.engine import derived
from orchestrator.engine.errors import FailedPrecondition, InvalidArgument
from orchestrator.engine.events import fold
from orchestrator.engine.replay import (
    MODES,
    ReplayRequest,
    check_point,
    check_replayable,
    check_step_workflow,
    replay_as_new_run,
    replay_in_place,
)
from orchestrator.engine.start import StartCommand, start_workflow
from orchestrator.engine.state import CLOSED_STATUSES, OPEN, RunKey
from sdk.api.weft.v1 import common_pb2 as c

from .builder import (
    KEY,
    T0,
    Run,
    cancel_workflow,
    complete_workflow,
    continue_as_new,
    fail_workflow,
    payload,
    started,
)
from .decider_turns import decider_turn

DEFINITION = "name: flow\nsteps:\n  - id: check\n    return ok\n"
NEW_KEY = RunKey(KEY.namespace, KEY.workflow_id, "run-3")


def point(doc: object) -> c.Payload:
    return c.Payload(data=json.dumps(doc).encode(), encoding="json")


def request(
    mode: str = "resuming",
    step: str = "",
    *,
    force: bool = False,
    at: c.Payload | None = None,
) -> ReplayRequest:
    return ReplayRequest(
        mode=mode,
        step=step,
        force=force,
        identity="ops@host",
        reason="try again",
        point=point({"index": 2, "resume": False}) if at is None else at,
    )


# --- the request's checks ----------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "step"),
    [("resuming", ""), ("from", "check"), ("from_start", ""), ("last", "")],
)
def test_each_mode_is_taken_with_a_step_for_from_only(mode: str, step: str) -> None:
    request(mode, step).check()


def test_the_modes_are_the_four_of_weft_replay() -> None:
    assert set(MODES) == {"resuming", "from", "from_start", "last"}


@pytest.mark.parametrize(
    ("mode", "step", "message"),
    [
        ("sideways", "", "mode must be one of"),
        ("", "", "mode must be one of"),
        ("FROM", "check", "mode must be one of"),
        ("from", "", "a step is given with mode 'from'"),
        ("last", "check", "a step is given with mode 'from'"),
        ("resuming", "check", "a step is given with mode 'from'"),
        ("from_start", "check", "a step is given with mode 'from'"),
    ],
    ids=[
        "unknown-mode",
        "no-mode",
        "mode-in-capitals",
        "from-without-a-step",
        "last-with-a-step",
        "resuming-with-a-step",
        "from-start-with-a-step",
    ],
)
def test_a_bad_mode_or_a_step_with_the_wrong_mode_is_refused(
    mode: str, step: str, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        request(mode, step).check()


@pytest.mark.parametrize(
    "doc",
    [
        {"index": 0, "resume": False},
        {"index": 7, "resume": True},
        {"index": 3, "resume": False, "step": "check", "variables": {"n": 1}},
    ],
    ids=["first-step", "resume", "more-for-the-interpreter"],
)
def test_a_resolved_point_is_taken(doc: object) -> None:
    check_point(point(doc))


BAD_POINTS: list[tuple[str, c.Payload | None]] = [
    ("none", None),
    ("empty", c.Payload()),
    ("not-json", c.Payload(data=b"somewhere", encoding="json")),
    ("a-string", point("somewhere")),
    ("a-list", point([2, False])),
    ("no-index", point({"resume": False})),
    ("negative-index", point({"index": -1, "resume": False})),
    ("boolean-index", point({"index": True, "resume": False})),
    ("float-index", point({"index": 2.0, "resume": False})),
    ("string-index", point({"index": "2", "resume": False})),
    ("no-resume", point({"index": 2})),
    ("number-resume", point({"index": 2, "resume": 0})),
    ("string-resume", point({"index": 2, "resume": "yes"})),
    ("null-resume", point({"index": 2, "resume": None})),
]


@pytest.mark.parametrize("at", [row[1] for row in BAD_POINTS], ids=[row[0] for row in BAD_POINTS])
def test_a_point_not_resolved_from_the_history_is_refused(at: c.Payload | None) -> None:
    with pytest.raises(InvalidArgument, match="point must be a JSON object"):
        check_point(at)


# --- which runs replay --------------------------------------------------------------

ENDINGS: list[tuple[str, Callable[[Run], object], str, bool]] = [
    # id, how the run ends (or not), its status, replayed
    ("open", lambda r: None, OPEN, True),
    ("failed", lambda r: r.step(fail_workflow()), "failed", True),
    ("timed-out", lambda r: r.fire_when_due(derived.WORKFLOW_TIMEOUT, 1), "timed_out", True),
    ("canceled", lambda r: r.step(cancel_workflow()), "canceled", True),
    ("terminated", lambda r: r.terminate(), "terminated", True),
    ("completed", lambda r: r.step(complete_workflow()), "completed", False),
    ("continued-as-new", lambda r: r.step(continue_as_new()), "continued_as_new", False),
]


def test_every_status_is_decided() -> None:
    assert {row[2] for row in ENDINGS} == {OPEN, *CLOSED_STATUSES}


@pytest.mark.parametrize(
    ("end", "status", "replayed"),
    [row[1:] for row in ENDINGS],
    ids=[row[0] for row in ENDINGS],
)
def test_an_open_run_or_one_that_ended_badly_replays_and_no_other(
    end: Callable[[Run], object], status: str, replayed: bool
) -> None:
    run = started(definition=DEFINITION)
    end(run)
    assert run.state.status == status
    if replayed:
        check_replayable(run.state.status)
    else:
        with pytest.raises(FailedPrecondition, match=status.replace("_", " ")) as info:
            check_replayable(run.state.status)
        assert "only failed, timed out, canceled or terminated runs are" in str(info.value)


@pytest.mark.parametrize(
    "end", [row[1] for row in ENDINGS if row[3]], ids=[row[0] for row in ENDINGS if row[3]]
)
def test_only_a_step_workflow_replays(end: Callable[[Run], object]) -> None:
    run = started()  # no definition: not a step workflow
    end(run)
    with pytest.raises(
        FailedPrecondition, match="'wf-1' is not a step workflow: only those replay"
    ):
        check_step_workflow(run.key.workflow_id, run.event(1).workflow_started)
    check_step_workflow(
        run.key.workflow_id, started(definition=DEFINITION).event(1).workflow_started
    )


@pytest.mark.parametrize(
    "end",
    [row[1] for row in ENDINGS if row[2] != OPEN],
    ids=[row[0] for row in ENDINGS if row[2] != OPEN],
)
def test_a_closed_run_is_not_replayed_in_place(end: Callable[[Run], object]) -> None:
    run = started(definition=DEFINITION)
    end(run)
    with pytest.raises(FailedPrecondition, match="already closed"):
        run.apply(lambda t: replay_in_place(t, request()))
    run.assert_refused_cleanly()


# --- an open run: in place --------------------------------------------------------


def test_an_open_run_gets_the_request_and_a_decision_task() -> None:
    run = started(definition=DEFINITION)
    run.step()
    run.advance(60)
    req = request("from", "check", force=True)
    run.apply(lambda t: replay_in_place(t, req))
    assert run.last_types == ["ReplayRequested", "DeciderScheduled"]
    event = run.history[-2]
    asked = event.replay_requested
    assert (asked.mode, asked.step, asked.force, asked.identity, asked.reason) == (
        "from",
        "check",
        True,
        "ops@host",
        "try again",
    )
    assert asked.point == point({"index": 2, "resume": False})
    assert asked.replay_of_run_id == ""
    assert event.timestamp.ToDatetime(tzinfo=T0.tzinfo) == T0 + timedelta(seconds=60)
    assert run.decision_tasks() == [event.event_id + 1]
    assert run.state.replay_of_run_id == ""
    assert fold(run.key, run.history).folded_part() == run.state.folded_part()


def test_a_request_without_a_point_records_none() -> None:
    run = started(definition=DEFINITION)
    req = ReplayRequest("last", "", False, "ops", "", None)
    run.apply(lambda t: replay_in_place(t, req))
    assert not run.history[-1].replay_requested.HasField("point")


def test_a_request_while_the_decider_works_refuses_its_close() -> None:
    run = started(definition=DEFINITION)
    token = decider_turn(run)
    run.apply(lambda t: replay_in_place(t, request()))
    assert run.last_types == ["ReplayRequested", "DeciderScheduled"]  # queued behind it
    run.decide(token, complete_workflow())
    assert run.last_types == ["DeciderCompleted", "WorkflowCloseFailed"]
    assert run.history[-1].workflow_close_failed.cause == "UNHANDLED_EVENTS"
    assert run.state.is_open


# --- a run that ended badly: a new run ----------------------------------------------


def ended_badly(*, with_input: bool = True) -> Run:
    run = Run()
    cmd = StartCommand(
        type_name="order",
        type_version="4",
        task_list="orders",
        input=payload("the order") if with_input else None,
        execution_timeout=900.0,
        decider_timeout=15.0,
        identity="starter",
        definition=DEFINITION,
    )
    run.apply(lambda t: start_workflow(t, cmd))
    run.step(fail_workflow("boom"))
    return run


def replayed(old: Run, req: ReplayRequest, after: float = 3600.0) -> Run:
    new = Run(NEW_KEY, old.now + timedelta(seconds=after))
    first = old.event(1).workflow_started
    new.apply(lambda t: replay_as_new_run(t, first, old.key.run_id, req))
    return new


def test_the_new_run_starts_as_the_old_one_did_then_asks_for_the_replay() -> None:
    old = ended_badly()
    history = [e.SerializeToString() for e in old.history]
    new = replayed(old, request("last"))
    assert new.types == ["WorkflowStarted", "ReplayRequested", "DeciderScheduled"]

    was, now = old.event(1).workflow_started, new.event(1).workflow_started
    assert (now.workflow_type, now.task_list, now.input, now.definition) == (
        was.workflow_type,
        was.task_list,
        was.input,
        was.definition,
    )
    assert (now.execution_timeout, now.decider_timeout) == (
        was.execution_timeout,
        was.decider_timeout,
    )
    assert now.workflow_type == c.WorkflowType(name="order", version="4")
    # Started by the operator, linked to the run it replays.
    assert (now.identity, now.replay_of_run_id) == ("ops@host", KEY.run_id)
    assert now.continued_from_run_id == ""
    asked = new.event(2).replay_requested
    assert (asked.mode, asked.identity, asked.replay_of_run_id) == ("last", "ops@host", KEY.run_id)
    assert asked.point == point({"index": 2, "resume": False})
    scheduled = new.event(3).decider_scheduled
    assert (scheduled.task_list, scheduled.start_to_close_timeout) == (
        "orders",
        was.decider_timeout,
    )

    state = new.state
    assert state.key == NEW_KEY and state.is_open
    assert (state.type_name, state.type_version, state.task_list) == ("order", "4", "orders")
    assert (state.execution_timeout, state.decider_timeout) == (900.0, 15.0)
    assert state.replay_of_run_id == KEY.run_id
    # Its own clock: the execution timeout runs from the replay, not the old start.
    assert state.started_at == new.now.timestamp()
    assert new.deadlines()[(derived.WORKFLOW_TIMEOUT, 1)] == new.now.timestamp() + 900.0
    assert new.decision_tasks() == [3]
    assert fold(new.key, new.history).folded_part() == state.folded_part()
    # The old run is as it was.
    assert [e.SerializeToString() for e in old.history] == history
    assert old.state.status == "failed"


def test_an_old_run_without_input_is_replayed_without_input() -> None:
    new = replayed(ended_badly(with_input=False), request())
    assert not new.event(1).workflow_started.HasField("input")


def test_the_new_runs_decider_takes_its_first_task() -> None:
    new = replayed(ended_badly(), request())
    token = new.poll_decision()
    assert token.scheduled_id == 3
    new.decide(token, complete_workflow())
    assert new.state.status == "completed"

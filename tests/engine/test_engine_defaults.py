"""The rules of `engine/defaults.py`, `Limits.suggests_continue_as_new` and
`children.children_to_close`, pure: where a setting comes from when a request
leaves it out (request, then registered type, then server default), which
registration a start means, when a decision task suggests continue-as-new, and
which children a parent's close acts on."""

from __future__ import annotations

import pytest

from orchestrator.engine.children import children_to_close
from orchestrator.engine.context import DecisionContext
from orchestrator.engine.defaults import (
    RegisteredActivityType,
    RegisteredWorkflowType,
    chosen_type,
    first_given,
    start_task_list,
    start_timeouts,
    type_candidates,
)
from orchestrator.engine.errors import InvalidArgument
from orchestrator.engine.limits import Defaults, Limits
from orchestrator.engine.start import DEFAULT_VERSION
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h

from .builder import TASK_LIST, Run, schedule_activity, start_child

SERVER = Defaults(execution_timeout=1000.0, decider_timeout=20.0, activity_start_to_close=300.0)
REGISTERED = RegisteredWorkflowType(
    version="2", task_list="registered-tl", execution_timeout=500.0, decider_timeout=15.0
)


@pytest.mark.parametrize(
    ("request_value", "registered", "fallback", "expected"),
    [
        ("req", "reg", "fb", "req"),
        ("", "reg", "fb", "reg"),
        (None, "reg", "fb", "reg"),
        ("", "", "fb", "fb"),
        (None, None, "fb", "fb"),
        (5.0, 7.0, 9.0, 5.0),
        (None, 7.0, 9.0, 7.0),
        (None, None, 9.0, 9.0),
    ],
)
def test_first_given_is_request_then_registered_then_fallback(
    request_value: object, registered: object, fallback: object, expected: object
) -> None:
    assert first_given(request_value, registered, fallback) == expected


def test_a_start_naming_no_version_means_the_unversioned_type_then_the_default_version() -> None:
    assert type_candidates("t", "") == [("t", ""), ("t", DEFAULT_VERSION)]
    assert type_candidates("t", "3") == [("t", "3")]
    unversioned = RegisteredWorkflowType(version="", task_list="a")
    versioned = RegisteredWorkflowType(version=DEFAULT_VERSION, task_list="b")
    both = {("t", ""): unversioned, ("t", DEFAULT_VERSION): versioned}
    assert chosen_type(both, "t", "") is unversioned
    assert chosen_type({("t", DEFAULT_VERSION): versioned}, "t", "") is versioned
    # Not registered: nothing taken from a registration, the named version kept.
    assert chosen_type({}, "t", "3") == RegisteredWorkflowType(version="3")
    assert chosen_type({("t", DEFAULT_VERSION): versioned}, "t", "3") == RegisteredWorkflowType(
        version="3"
    )


def test_a_start_task_list_is_the_request_then_the_registration_then_the_parent() -> None:
    assert start_task_list(REGISTERED, "asked") == "asked"
    assert start_task_list(REGISTERED, "") == "registered-tl"
    assert start_task_list(RegisteredWorkflowType(), "", inherited="parent-tl") == "parent-tl"
    with pytest.raises(InvalidArgument, match="task_list is required"):
        start_task_list(RegisteredWorkflowType(), "")


def test_start_timeouts_are_the_request_then_the_registration_then_the_server() -> None:
    assert start_timeouts(REGISTERED, SERVER, 60.0, 5.0) == (60.0, 5.0)
    assert start_timeouts(REGISTERED, SERVER, None, None) == (500.0, 15.0)
    assert start_timeouts(RegisteredWorkflowType(), SERVER, None, None) == (1000.0, 20.0)
    assert start_timeouts(RegisteredWorkflowType(), SERVER, None, 3.0) == (1000.0, 3.0)


def _scheduled(run: Run) -> d.ScheduleActivityDecision:
    [event] = [e for e in run.history if e.type == "ActivityScheduled"]
    return event.activity_scheduled  # type: ignore[return-value]


def _seconds(attrs: object, name: str) -> float | None:
    if not attrs.HasField(f"{name}_timeout"):  # type: ignore[attr-defined]
        return None
    value = getattr(attrs, f"{name}_timeout")
    return float(value.ToTimedelta().total_seconds())


ACTIVITY = RegisteredActivityType(
    task_list="registered-acts",
    schedule_to_start=30.0,
    start_to_close=40.0,
    schedule_to_close=50.0,
    heartbeat=6.0,
)


@pytest.mark.parametrize(
    ("registered", "asked", "expected"),
    [
        # nothing registered, nothing asked: the run's task list, the server's start-to-close
        (
            None,
            {},
            (TASK_LIST, None, 300.0, None, None),
        ),
        # registered, nothing asked: all from the registration
        (ACTIVITY, {}, ("registered-acts", 30.0, 40.0, 50.0, 6.0)),
        # asked wins over the registration, field by field
        (
            ACTIVITY,
            {"task_list": "asked", "start_to_close": 4.0, "heartbeat": 1.0},
            ("asked", 30.0, 4.0, 50.0, 1.0),
        ),
        # a registration without start-to-close: the server's
        (
            RegisteredActivityType(heartbeat=2.0),
            {},
            (TASK_LIST, None, 300.0, None, 2.0),
        ),
    ],
    ids=["nothing", "registered", "asked-wins", "server-start-to-close"],
)
def test_a_scheduled_activity_takes_the_request_then_the_registration_then_the_server(
    registered: RegisteredActivityType | None,
    asked: dict[str, object],
    expected: tuple[str, float | None, float | None, float | None, float | None],
) -> None:
    types = {("work", "1"): registered} if registered is not None else {}
    ctx = DecisionContext(defaults=SERVER, activity_types=types, new_run_id="run-2")
    run = Run(ctx=ctx).start()
    run.step(schedule_activity("a", **asked))  # type: ignore[arg-type]
    attrs = _scheduled(run)
    got = (
        attrs.task_list,
        _seconds(attrs, "schedule_to_start"),
        _seconds(attrs, "start_to_close"),
        _seconds(attrs, "schedule_to_close"),
        _seconds(attrs, "heartbeat"),
    )
    assert got == expected


def test_a_child_takes_the_registration_then_the_parent_and_the_server() -> None:
    ctx = DecisionContext(
        defaults=SERVER,
        child_types={("sub", ""): REGISTERED},
        child_run_ids={"c1": "child-1", "c2": "child-2"},
        new_run_id="run-2",
    )
    run = Run(ctx=ctx).start()
    run.step(start_child("c1"), start_child("c2", name="other", decider_timeout=7.0))
    first, second = (n.events[0].workflow_started for n in run.new_runs)
    assert first.task_list == "registered-tl"
    assert first.workflow_type.version == "2"
    assert first.execution_timeout.ToTimedelta().total_seconds() == 500.0
    assert second.task_list == TASK_LIST  # the parent's
    assert second.execution_timeout.ToTimedelta().total_seconds() == 1000.0
    assert second.decider_timeout.ToTimedelta().total_seconds() == 7.0


@pytest.mark.parametrize(
    ("length", "suggested"), [(8_999, False), (9_000, True), (9_500, True), (10, False)]
)
def test_continue_as_new_is_suggested_from_nine_tenths_of_the_event_limit(
    length: int, suggested: bool
) -> None:
    assert Limits(events_per_run=10_000).suggests_continue_as_new(length) is suggested


def test_a_parent_close_acts_on_its_open_children_except_the_abandoned() -> None:
    ctx = DecisionContext(
        child_run_ids={"keep": "r-keep", "drop": "r-drop", "gone": "r-gone"}, new_run_id="run-2"
    )
    run = Run(ctx=ctx).start()
    run.step(
        start_child("keep", policy=d.PARENT_CLOSE_POLICY_REQUEST_CANCEL),
        start_child("drop", policy=d.PARENT_CLOSE_POLICY_ABANDON),
        start_child("gone"),
    )
    before = list(run.state.children.values())
    assert {c.workflow_id for c in before} == {"keep", "drop", "gone"}
    # The closing transition starts one more child and hears that "gone" closed.
    started_new = h.HistoryEvent(event_id=99, type="ChildWorkflowStarted")
    started_new.child_workflow_started.workflow_id = "new"
    started_new.child_workflow_started.run_id = "r-new"
    started_new.child_workflow_started.parent_close_policy = "terminate"
    closed_gone = h.HistoryEvent(event_id=100, type="ChildWorkflowSuccess")
    closed_gone.child_workflow_success.workflow_id = "gone"
    acted = children_to_close(before, [started_new, closed_gone])
    assert sorted((c.workflow_id, c.run_id, c.parent_close_policy) for c in acted) == [
        ("keep", "r-keep", "request_cancel"),
        ("new", "r-new", "terminate"),
    ]

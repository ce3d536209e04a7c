"""`DecisionTask`'s decision builders, the close-decision rule, and `Decision.to_proto`."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from sdk import Decision, DecisionTask, WeftError, activity
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.testing import HistoryBuilder, task_for


@activity(
    name="charge-card",
    version="2",
    task_list="pci",
    schedule_to_start=timedelta(seconds=5),
    start_to_close=timedelta(seconds=30),
    schedule_to_close=timedelta(minutes=2),
    heartbeat=timedelta(seconds=10),
)
def charge(card: dict[str, Any]) -> dict[str, Any]:
    return card


def base() -> HistoryBuilder:
    return HistoryBuilder().started({"order": 7}, workflow_type="order").decision_task()


# -- deciding ----------------------------------------------------------------------------

NONE4 = {"schedule_to_start": None, "start_to_close": None, "schedule_to_close": None}
BUILDERS: list[tuple[str, Callable[[DecisionTask], None], Decision]] = [
    (
        "schedule-str",
        lambda t: t.schedule_activity("a", "resize", {"n": 1}),
        Decision(
            "ScheduleActivity",
            {"activity_id": "a", "activity_type": "resize", "version": "", "input": {"n": 1}}
            | {"task_list": "", **NONE4, "heartbeat": None},
        ),
    ),
    (
        "schedule-def",
        lambda t: t.schedule_activity("c", charge, [1]),
        Decision(
            "ScheduleActivity",
            {"activity_id": "c", "activity_type": "charge-card", "version": "2", "input": [1]}
            | {"task_list": "pci", "schedule_to_start": timedelta(seconds=5)}
            | {"start_to_close": timedelta(seconds=30), "schedule_to_close": timedelta(minutes=2)}
            | {"heartbeat": timedelta(seconds=10)},
        ),
    ),
    (
        "schedule-def-override",
        lambda t: t.schedule_activity(
            "c",
            charge,
            version="3",
            task_list="other",
            schedule_to_start=timedelta(seconds=1),
            start_to_close=timedelta(seconds=2),
            schedule_to_close=timedelta(seconds=3),
            heartbeat=timedelta(seconds=4),
        ),
        Decision(
            "ScheduleActivity",
            {"activity_id": "c", "activity_type": "charge-card", "version": "3", "input": None}
            | {"task_list": "other", "schedule_to_start": timedelta(seconds=1)}
            | {"start_to_close": timedelta(seconds=2), "schedule_to_close": timedelta(seconds=3)}
            | {"heartbeat": timedelta(seconds=4)},
        ),
    ),
    (
        "cancel-activity",
        lambda t: t.cancel_activity("a"),
        Decision("RequestCancelActivity", {"activity_id": "a"}),
    ),
    (
        "start-timer",
        lambda t: t.start_timer("t1", timedelta(minutes=5)),
        Decision("StartTimer", {"timer_id": "t1", "delay": timedelta(minutes=5)}),
    ),
    ("cancel-timer", lambda t: t.cancel_timer("t1"), Decision("CancelTimer", {"timer_id": "t1"})),
    (
        "marker",
        lambda t: t.record_marker("m", {"v": 1}),
        Decision("RecordMarker", {"marker_name": "m", "details": {"v": 1}}),
    ),
    (
        "complete",
        lambda t: t.complete({"r": 1}),
        Decision("CompleteWorkflow", {"result": {"r": 1}}),
    ),
    (
        "fail",
        lambda t: t.fail("Bad", {"d": 1}),
        Decision("FailWorkflow", {"reason": "Bad", "details": {"d": 1}}),
    ),
    ("cancel", lambda t: t.cancel("bye"), Decision("CancelWorkflow", {"details": "bye"})),
    (
        "continue-as-new",
        lambda t: t.continue_as_new(
            {"i": 2},
            workflow_type="o2",
            version="v",
            task_list="tl",
            execution_timeout=timedelta(days=1),
            decider_timeout=timedelta(seconds=9),
        ),
        Decision(
            "ContinueAsNew",
            {"input": {"i": 2}, "workflow_type": "o2", "version": "v", "task_list": "tl"}
            | {"execution_timeout": timedelta(days=1), "decider_timeout": timedelta(seconds=9)},
        ),
    ),
]


@pytest.mark.parametrize(
    ("build", "expected"), [c[1:] for c in BUILDERS], ids=[c[0] for c in BUILDERS]
)
def test_builder_records_decision(
    build: Callable[[DecisionTask], None], expected: Decision
) -> None:
    task = task_for(base().events)
    build(task)
    assert task.decisions == [expected]
    assert task.closed is (
        expected.kind in {"CompleteWorkflow", "FailWorkflow", "CancelWorkflow", "ContinueAsNew"}
    )


def test_builders_default_values() -> None:
    task = task_for(base().events)
    task.record_marker("m")
    task.complete()
    assert task.decisions == [
        Decision("RecordMarker", {"marker_name": "m", "details": None}),
        Decision("CompleteWorkflow", {"result": None}),
    ]


CLOSERS = [
    c
    for c in BUILDERS
    if c[2].kind in {"CompleteWorkflow", "FailWorkflow", "CancelWorkflow", "ContinueAsNew"}
]


@pytest.mark.parametrize(("close",), [(c[1],) for c in CLOSERS], ids=[c[0] for c in CLOSERS])
@pytest.mark.parametrize(("after", "_"), [c[1:] for c in BUILDERS], ids=[c[0] for c in BUILDERS])
def test_nothing_after_a_close_decision(
    close: Callable[[DecisionTask], None], after: Callable[[DecisionTask], None], _: Decision
) -> None:
    task = task_for(base().events)
    task.start_timer("t", timedelta(seconds=1))
    close(task)
    before = list(task.decisions)
    with pytest.raises(WeftError, match=r"after \w+: a close decision must be the last"):
        after(task)
    assert task.decisions == before


# -- to_proto ----------------------------------------------------------------------------


def proto_of(build: Callable[[DecisionTask], None]) -> Any:
    task = task_for(base().events)
    build(task)
    return task.decisions[0].to_proto()


def payload(p: Any) -> Any:
    assert p.encoding == "json"
    return json.loads(p.data)


def test_schedule_activity_proto() -> None:
    msg = proto_of(BUILDERS[1][1])
    assert msg.WhichOneof("attributes") == "schedule_activity"
    s = msg.schedule_activity
    assert (s.activity_id, s.activity_type.name, s.activity_type.version, s.task_list) == (
        "c",
        "charge-card",
        "2",
        "pci",
    )
    assert payload(s.input) == [1]
    assert s.schedule_to_start_timeout.ToTimedelta() == timedelta(seconds=5)
    assert s.start_to_close_timeout.ToTimedelta() == timedelta(seconds=30)
    assert s.schedule_to_close_timeout.ToTimedelta() == timedelta(minutes=2)
    assert s.heartbeat_timeout.ToTimedelta() == timedelta(seconds=10)


def test_schedule_activity_proto_leaves_unset_timeouts_unset() -> None:
    s = proto_of(BUILDERS[0][1]).schedule_activity
    for name in ("schedule_to_start", "start_to_close", "schedule_to_close", "heartbeat"):
        assert not s.HasField(f"{name}_timeout")
    assert (s.task_list, s.activity_type.version, payload(s.input)) == ("", "", {"n": 1})


@pytest.mark.parametrize(
    ("index", "oneof", "check"),
    [
        (3, "request_cancel_activity", lambda m: m.activity_id == "a"),
        (4, "start_timer", lambda m: (m.timer_id, m.start_to_fire_timeout.seconds) == ("t1", 300)),
        (5, "cancel_timer", lambda m: m.timer_id == "t1"),
        (6, "record_marker", lambda m: (m.marker_name, payload(m.details)) == ("m", {"v": 1})),
        (7, "complete_workflow", lambda m: payload(m.result) == {"r": 1}),
        (8, "fail_workflow", lambda m: (m.reason, payload(m.details)) == ("Bad", {"d": 1})),
        (9, "cancel_workflow", lambda m: payload(m.details) == "bye"),
        (
            10,
            "continue_as_new",
            lambda m: (
                (payload(m.input), m.workflow_type.name, m.workflow_type.version, m.task_list)
                == ({"i": 2}, "o2", "v", "tl")
                and m.execution_timeout.ToTimedelta() == timedelta(days=1)
                and m.decider_timeout.ToTimedelta() == timedelta(seconds=9)
            ),
        ),
    ],
)
def test_decision_proto_fields(index: int, oneof: str, check: Callable[[Any], bool]) -> None:
    msg = proto_of(BUILDERS[index][1])
    assert msg.WhichOneof("attributes") == oneof
    assert check(getattr(msg, oneof)) is True


def test_proto_round_trips_through_bytes_and_subsecond_durations() -> None:

    msg = proto_of(lambda t: t.start_timer("t", timedelta(milliseconds=1500)))
    again = d.Decision.FromString(msg.SerializeToString())
    assert again == msg
    assert (
        again.start_timer.start_to_fire_timeout.seconds,
        again.start_timer.start_to_fire_timeout.nanos,
    ) == (1, 500_000_000)


def test_none_payload_is_json_null_and_unset_continue_options() -> None:
    m = proto_of(lambda t: t.continue_as_new()).continue_as_new
    assert payload(m.input) is None
    assert (m.workflow_type.name, m.task_list) == ("", "")
    assert not m.HasField("execution_timeout") and not m.HasField("decider_timeout")
    assert payload(proto_of(lambda t: t.complete()).complete_workflow.result) is None


def test_unknown_decision_kind_is_refused() -> None:
    with pytest.raises(WeftError, match="unknown decision 'Teleport'"):
        Decision("Teleport", {"to": "x"}).to_proto()


def test_lock_decisions() -> None:
    task = task_for(base().events)
    task.request_lock("quota-ada")
    task.release_lock("old")
    assert task.decisions == [
        Decision("RequestLock", {"lock_name": "quota-ada"}),
        Decision("ReleaseLock", {"lock_name": "old"}),
    ]
    assert [dec.to_proto() for dec in task.decisions] == [
        d.Decision(request_lock=d.RequestLockDecision(lock_name="quota-ada")),
        d.Decision(release_lock=d.ReleaseLockDecision(lock_name="old")),
    ]


def test_continue_as_new_carries_the_locks_it_is_told_to() -> None:
    history = (
        HistoryBuilder()
        .started({"order": 7}, workflow_type="order", continued_from_run_id="r0")
        .decision_task()
    )
    for kind, name in [
        ("LockRequested", "a"),
        ("LockAcquired", "a"),
        ("LockRequested", "b"),
        ("LockRequested", "c"),
        ("LockReleased", "c"),
    ]:
        history.add(kind, lock_name=name)
    history.decision_completed().decision_task()
    everything = proto_of_history(history, lambda t: t.continue_as_new(carry_locks=True))
    assert list(everything.continue_as_new.carried_locks) == ["a", "b"]
    named = proto_of_history(history, lambda t: t.continue_as_new(carry_locks=["b"]))
    assert list(named.continue_as_new.carried_locks) == ["b"]
    task = task_for(history.events)
    task.continue_as_new()
    assert "carried_locks" not in task.decisions[0].attributes


def test_a_carried_lock_is_held_from_the_first_event() -> None:
    history = HistoryBuilder().started(carried_locks=["quota"]).decision_task()
    lock = task_for(history.events).locks["quota"]
    assert lock.held
    assert (lock.requested_event_id, lock.acquired_event_id) == (1, 1)


def proto_of_history(history: HistoryBuilder, build: Callable[[DecisionTask], None]) -> d.Decision:
    task = task_for(history.events)
    build(task)
    return task.decisions[-1].to_proto()

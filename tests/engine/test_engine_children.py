"""Starting children and signalling other runs, one run at a time
(engine/children.py): a StartChildWorkflow decision and the run it opens, where
the child's type version, task list and timeouts come from, the POLICIES table,
the starts that fail or are refused, and SignalExternalWorkflow. What a parent
hears of its child's end and what its close does to the child:
test_engine_child_closes.py. The store applies the child's run and the signals
in the decision's transaction (tests/e2e/test_children.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from google.protobuf.duration_pb2 import Duration

from orchestrator.engine import children, derived
from orchestrator.engine.context import DecisionContext
from orchestrator.engine.defaults import RegisteredWorkflowType
from orchestrator.engine.errors import InvalidArgument
from orchestrator.engine.events import fold
from orchestrator.engine.limits import Defaults, Limits
from orchestrator.engine.state import ChildState, RunKey
from orchestrator.engine.transition import OutboundSignal
from sdk.api.weft.v1 import decisions_pb2 as d

from .builder import (
    KEY,
    TASK_LIST,
    Run,
    complete_workflow,
    payload,
    signal_external,
    start_child,
    started,
)
from .decider_turns import decider_turn

KID = "kid"
KID_RUN = "kid-run-1"
CTX = DecisionContext(new_run_id="run-2", child_run_ids={KID: KID_RUN})


def seconds(duration: Duration) -> float:
    return duration.ToTimedelta().total_seconds()


# --- starting a child ---------------------------------------------------------------


def test_a_child_start_opens_its_run_linked_to_the_parent() -> None:
    parent = started()
    parent.advance(7)
    token = parent.poll_decision()
    decision = start_child(
        KID, version="2", policy=d.PARENT_CLOSE_POLICY_ABANDON, input_text="hello"
    )
    parent.decide(token, decision, ctx=CTX)
    # ChildWorkflowStarted is no trigger: the decider asked for it.
    assert parent.last_types == ["DeciderCompleted", "ChildWorkflowStarted"]
    event = parent.history[-1]
    a = event.child_workflow_started
    assert (a.workflow_id, a.run_id, a.workflow_type.name, a.workflow_type.version) == (
        KID,
        KID_RUN,
        "sub",
        "2",
    )
    assert (a.task_list, a.parent_close_policy) == (TASK_LIST, "abandon")
    assert a.decider_completed_event_id == event.event_id - 1
    assert a.input == payload("hello")
    assert parent.state.children == {
        KID: ChildState(
            workflow_id=KID,
            run_id=KID_RUN,
            started_id=event.event_id,
            parent_close_policy="abandon",
        )
    }

    [opened] = parent.new_runs
    assert opened.state.key == RunKey(KEY.namespace, KID, KID_RUN)
    assert [e.type for e in opened.events] == ["WorkflowStarted", "DeciderScheduled"]
    first = opened.events[0]
    assert first.timestamp == event.timestamp  # in the same transaction
    ws = first.workflow_started
    assert (ws.parent_workflow_id, ws.parent_run_id, ws.parent_started_event_id) == (
        KEY.workflow_id,
        KEY.run_id,
        event.event_id,
    )
    assert (ws.workflow_type.name, ws.workflow_type.version, ws.task_list) == (
        "sub",
        "2",
        TASK_LIST,
    )
    assert ws.identity == f"parent:{KEY.workflow_id}"
    assert ws.input == payload("hello")
    state = opened.state
    assert (state.parent_workflow_id, state.parent_run_id, state.parent_started_id) == (
        KEY.workflow_id,
        KEY.run_id,
        event.event_id,
    )
    assert state.is_open and state.decider.scheduled_id == 2
    assert fold(state.key, opened.events).folded_part() == state.folded_part()
    assert fold(parent.key, parent.history).folded_part() == parent.state.folded_part()


def test_a_child_without_input_starts_without_input() -> None:
    parent = started()
    parent.decide(parent.poll_decision(), start_child(KID), ctx=CTX)
    assert not parent.history[-1].child_workflow_started.HasField("input")
    assert not parent.new_runs[0].events[0].workflow_started.HasField("input")


REGISTERED = RegisteredWorkflowType(
    version="9",
    task_list="registered-list",
    execution_timeout=200.0,
    decider_timeout=20.0,
    definition="name: sub\nsteps:\n  - return ok\n",
)
DEFAULTS = Defaults(execution_timeout=300.0, decider_timeout=30.0)

PRECEDENCE: list[
    tuple[str, dict[str, object], dict[tuple[str, str], RegisteredWorkflowType], tuple[object, ...]]
] = [
    # id, decision fields, registrations,
    # (version, task list, execution timeout, decider timeout, definition)
    (
        "the-decision-first",
        {
            "version": "3",
            "task_list": "own-list",
            "execution_timeout": 100.0,
            "decider_timeout": 10.0,
        },
        {("sub", "3"): REGISTERED},
        ("3", "own-list", 100.0, 10.0, REGISTERED.definition),
    ),
    (
        "then-the-registration",
        {},
        {("sub", ""): REGISTERED},
        ("9", "registered-list", 200.0, 20.0, REGISTERED.definition),
    ),
    (
        "then-the-parents-list-and-the-service-defaults",
        {},
        {},
        ("", TASK_LIST, 300.0, 30.0, ""),
    ),
    (
        "field-by-field",
        {"task_list": "own-list", "decider_timeout": 10.0},
        {("sub", ""): RegisteredWorkflowType(execution_timeout=200.0)},
        ("", "own-list", 200.0, 10.0, ""),
    ),
    (
        "a-registration-of-another-version-is-not-used",
        {"version": "3"},
        {("sub", ""): REGISTERED},
        ("3", TASK_LIST, 300.0, 30.0, ""),
    ),
]


@pytest.mark.parametrize(
    ("fields", "registered", "expected"),
    [row[1:] for row in PRECEDENCE],
    ids=[row[0] for row in PRECEDENCE],
)
def test_a_childs_type_version_task_list_and_timeouts_come_decision_registration_default(
    fields: dict[str, object],
    registered: dict[tuple[str, str], RegisteredWorkflowType],
    expected: tuple[object, ...],
) -> None:
    ctx = DecisionContext(child_run_ids={KID: KID_RUN}, child_types=registered, defaults=DEFAULTS)
    parent = started()
    parent.decide(parent.poll_decision(), start_child(KID, **fields), ctx=ctx)  # type: ignore[arg-type]
    version, task_list, execution, decider, definition = expected
    a = parent.history[-1].child_workflow_started
    assert (a.workflow_type.version, a.task_list) == (version, task_list)
    [opened] = parent.new_runs
    ws = opened.events[0].workflow_started
    assert (ws.workflow_type.version, ws.task_list, ws.definition) == (
        version,
        task_list,
        definition,
    )
    assert (seconds(ws.execution_timeout), seconds(ws.decider_timeout)) == (execution, decider)
    scheduled = opened.events[1].decider_scheduled
    assert (scheduled.task_list, seconds(scheduled.start_to_close_timeout)) == (task_list, decider)
    child = Run.opened(opened)
    assert child.deadlines()[(derived.WORKFLOW_TIMEOUT, 1)] == child.now.timestamp() + execution


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (d.PARENT_CLOSE_POLICY_UNSPECIFIED, "terminate"),
        (d.PARENT_CLOSE_POLICY_TERMINATE, "terminate"),
        (d.PARENT_CLOSE_POLICY_REQUEST_CANCEL, "request_cancel"),
        (d.PARENT_CLOSE_POLICY_ABANDON, "abandon"),
    ],
    ids=["unspecified", "terminate", "request-cancel", "abandon"],
)
def test_the_parent_close_policy_is_recorded_by_name(
    policy: d.ParentClosePolicy.ValueType, expected: str
) -> None:
    parent = started()
    parent.decide(parent.poll_decision(), start_child(KID, policy=policy), ctx=CTX)
    assert parent.history[-1].child_workflow_started.parent_close_policy == expected
    assert parent.state.children[KID].parent_close_policy == expected


def test_every_policy_the_wire_has_is_in_the_table() -> None:
    assert set(children.POLICIES) == set(d.ParentClosePolicy.values())
    assert set(children.POLICIES.values()) == {"terminate", "request_cancel", "abandon"}


def _taken_by_a_child(parent: Run) -> None:
    parent.decide(decider_turn(parent), start_child(KID), ctx=CTX)


START_FAILURES: list[
    tuple[str, Callable[[Run], None], frozenset[str], list[d.Decision], list[str], list[str]]
] = [
    # id, setup, open workflow ids, the answer, events after DeciderCompleted, causes
    (
        "a-child-of-this-run-has-the-id",
        _taken_by_a_child,
        frozenset(),
        [start_child(KID)],
        ["StartChildWorkflowFailed", "DeciderScheduled"],
        ["CHILD_ID_ALREADY_IN_USE"],
    ),
    (
        "another-workflow-runs-under-the-id",
        lambda r: None,
        frozenset({KID}),
        [start_child(KID)],
        ["StartChildWorkflowFailed", "DeciderScheduled"],
        ["WORKFLOW_ALREADY_RUNNING"],
    ),
    (
        "the-parents-own-id",
        lambda r: None,
        frozenset(),
        [start_child(KEY.workflow_id)],
        ["StartChildWorkflowFailed", "DeciderScheduled"],
        ["WORKFLOW_ALREADY_RUNNING"],
    ),
    (
        "in-use-is-said-first",
        _taken_by_a_child,
        frozenset({KID}),
        [start_child(KID)],
        ["StartChildWorkflowFailed", "DeciderScheduled"],
        ["CHILD_ID_ALREADY_IN_USE"],
    ),
    (
        "twice-in-one-answer",
        lambda r: None,
        frozenset(),
        [start_child(KID), start_child(KID)],
        ["ChildWorkflowStarted", "StartChildWorkflowFailed", "DeciderScheduled"],
        ["CHILD_ID_ALREADY_IN_USE"],
    ),
]


@pytest.mark.parametrize(
    ("setup", "open_ids", "decisions", "appended", "causes"),
    [row[1:] for row in START_FAILURES],
    ids=[row[0] for row in START_FAILURES],
)
def test_a_child_id_in_use_or_running_fails_the_start(
    setup: Callable[[Run], None],
    open_ids: frozenset[str],
    decisions: list[d.Decision],
    appended: list[str],
    causes: list[str],
) -> None:
    parent = started()
    setup(parent)
    before = copy.deepcopy(parent.state.children)
    runs_before = len(parent.new_runs)
    ctx = DecisionContext(
        child_run_ids={KID: KID_RUN, KEY.workflow_id: "x"}, open_workflows=open_ids
    )
    parent.decide(decider_turn(parent), *decisions, ctx=ctx)
    assert parent.last_types == ["DeciderCompleted", *appended]
    assert parent.last is not None
    failed = [e for e in parent.last.events if e.type == "StartChildWorkflowFailed"]
    attrs = [e.start_child_workflow_failed for e in failed]
    assert [a.cause for a in attrs] == causes
    last = decisions[-1].start_child_workflow
    assert [(a.workflow_id, a.workflow_type) for a in attrs] == [
        (last.workflow_id, last.workflow_type)
    ]
    assert {a.decider_completed_event_id for a in attrs} == {parent.last.events[0].event_id}
    # Only a start that succeeded opened a run or changed the children.
    started_here = appended.count("ChildWorkflowStarted")
    assert len(parent.new_runs) == runs_before + started_here
    if not started_here:
        assert parent.state.children == before


BAD_STARTS: list[tuple[str, d.Decision, str]] = [
    ("unknown-policy", start_child(KID, policy=99), "unknown parent_close_policy"),  # type: ignore[arg-type]
    ("no-workflow-id", start_child(""), "workflow_id is required"),
    ("too-long-workflow-id", start_child("k" * 1001), "workflow_id is longer than 1000"),
    ("no-type-name", start_child(KID, name=""), "workflow_type.name is required"),
    ("negative-timeout", start_child(KID, execution_timeout=-5), "must be positive"),
    ("zero-timeout", start_child(KID, decider_timeout=0), "must be positive"),
]


@pytest.mark.parametrize(
    ("decision", "message"), [row[1:] for row in BAD_STARTS], ids=[row[0] for row in BAD_STARTS]
)
def test_a_bad_child_start_refuses_the_whole_answer(decision: d.Decision, message: str) -> None:
    parent = started()
    token = parent.poll_decision()
    with pytest.raises(InvalidArgument, match=message):
        parent.decide(token, decision, ctx=CTX)
    parent.assert_refused_cleanly()
    assert parent.new_runs == []


def test_a_child_started_in_the_closing_answer_is_started_before_the_close() -> None:
    parent = started()
    parent.decide(parent.poll_decision(), start_child(KID), complete_workflow(), ctx=CTX)
    assert parent.last_types == ["DeciderCompleted", "ChildWorkflowStarted", "WorkflowSuccess"]
    assert len(parent.new_runs) == 1
    assert parent.state.children == {}  # the store applies the policy to the links before


# --- signals to other runs ----------------------------------------------------


def signal_ctx(
    *targets: tuple[str, str, str, str], limits: Limits | None = None
) -> DecisionContext:
    """(workflow id, run id) -> (run reached, why not) for each target."""
    return DecisionContext(
        signal_targets={(w, r): (to, why) for w, r, to, why in targets},
        limits=limits or Limits(),
    )


def test_a_signal_to_another_open_run_goes_out_with_the_transition() -> None:
    run = started()
    ctx = signal_ctx(("other", "", "other-run", ""))
    run.decide(run.poll_decision(), signal_external("other", "approved"), ctx=ctx)
    # Not a trigger: nothing came in that the decider did not ask for.
    assert run.last_types == ["DeciderCompleted", "ExternalWorkflowSignaled"]
    sent = run.history[-1].external_workflow_signaled
    assert (sent.workflow_id, sent.run_id, sent.signal_name) == ("other", "other-run", "approved")
    assert sent.decider_completed_event_id == run.history[-2].event_id
    assert run.last is not None
    assert run.last.outbox == [
        OutboundSignal(
            "other-run", "approved", payload("approved"), f"workflow:{KEY.workflow_id}", ctx.limits
        )
    ]
    assert run.state.signals == 0


@pytest.mark.parametrize(
    ("targets", "cause"),
    [
        ((), "UNKNOWN_EXTERNAL_WORKFLOW"),
        ((("other", "", "", "UNKNOWN_EXTERNAL_WORKFLOW"),), "UNKNOWN_EXTERNAL_WORKFLOW"),
        ((("other", "", "", "SIGNAL_LIMIT_EXCEEDED"),), "SIGNAL_LIMIT_EXCEEDED"),
        ((("other", "r-9", "other-run", ""),), "UNKNOWN_EXTERNAL_WORKFLOW"),  # another run asked
    ],
    ids=["not-read", "unknown", "full", "another-run-id"],
)
def test_a_signal_that_reaches_no_run_fails_and_tells_the_decider(
    targets: tuple[tuple[str, str, str, str], ...], cause: str
) -> None:
    run = started()
    run.decide(run.poll_decision(), signal_external("other", "x"), ctx=signal_ctx(*targets))
    assert run.last_types == [
        "DeciderCompleted",
        "SignalExternalWorkflowFailed",
        "DeciderScheduled",
    ]
    failed = run.history[-2].signal_external_workflow_failed
    assert (failed.workflow_id, failed.run_id, failed.signal_name, failed.cause) == (
        "other",
        "",
        "x",
        cause,
    )
    assert run.last is not None and run.last.outbox == []


def test_a_signal_to_itself_lands_in_the_same_answer_before_a_close() -> None:
    run = started()
    ctx = signal_ctx((KEY.workflow_id, "", KEY.run_id, ""))
    run.decide(
        run.poll_decision(), signal_external(KEY.workflow_id, "note"), complete_workflow(), ctx=ctx
    )
    assert run.last_types == [
        "DeciderCompleted",
        "ExternalWorkflowSignaled",
        "Signal",
        "WorkflowSuccess",
    ]
    sig = run.history[-2].signal
    assert (sig.signal_name, sig.identity, sig.input) == (
        "note",
        f"workflow:{KEY.workflow_id}",
        payload("note"),
    )
    assert run.last is not None and run.last.outbox == []


def test_signals_to_itself_earlier_in_the_answer_count_against_its_limit() -> None:
    run = started()
    ctx = signal_ctx((KEY.workflow_id, "", KEY.run_id, ""), limits=Limits(signals_per_run=1))
    me = KEY.workflow_id
    run.decide(run.poll_decision(), signal_external(me, "one"), signal_external(me, "two"), ctx=ctx)
    assert run.last_types == [
        "DeciderCompleted",
        "ExternalWorkflowSignaled",
        "Signal",
        "SignalExternalWorkflowFailed",
        "DeciderScheduled",
    ]
    assert run.history[-2].signal_external_workflow_failed.cause == "SIGNAL_LIMIT_EXCEEDED"
    assert run.state.signals == 1

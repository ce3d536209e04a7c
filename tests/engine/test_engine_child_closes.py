"""A child's end and its parent's close, one run at a time (engine/children.py):
how each way a child ends is told to its parent (`report_child_close`), and what
each parent close policy does to an open child (`apply_parent_close`). The store
applies both to the other run in the closing transaction
(tests/e2e/test_children.py). Starting a child: test_engine_children.py."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from orchestrator.engine import children, derived
from orchestrator.engine.context import DecisionContext
from orchestrator.engine.events import fold
from orchestrator.engine.state import ChildState, RunKey, RunState
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h

from .builder import (
    KEY,
    Run,
    cancel_workflow,
    complete_workflow,
    continue_as_new,
    fail_workflow,
    payload,
    start_child,
)
from .decider_turns import decider_turn

KID = "kid"
KID_RUN = "kid-run-1"
CTX = DecisionContext(new_run_id="run-2", child_run_ids={KID: KID_RUN})


def with_child(
    policy: d.ParentClosePolicy.ValueType = d.PARENT_CLOSE_POLICY_TERMINATE,
) -> tuple[Run, Run]:
    """A parent that started KID, and the child, which took and answered its
    first decision task (so that what comes next is all that a command appends)."""
    parent = Run(ctx=CTX).start()
    parent.step(start_child(KID, policy=policy))
    child = Run.opened(parent.new_runs[-1], ctx=DecisionContext(new_run_id="kid-run-2"))
    child.step()
    return parent, child


# --- the child's end, told to the parent ------------------------------------------

ENDINGS: list[
    tuple[str, Callable[[Run], object], str, Callable[[h.HistoryEvent], object], object]
] = [
    # id, how the child ends, what the parent is told, a field of it, its value
    (
        "success",
        lambda r: r.step(complete_workflow("sub-result")),
        "ChildWorkflowSuccess",
        lambda e: e.child_workflow_success.result,
        payload("sub-result"),
    ),
    (
        "failed",
        lambda r: r.step(fail_workflow("sub-boom")),
        "ChildWorkflowFailed",
        lambda e: e.child_workflow_failed.reason,
        "sub-boom",
    ),
    (
        "timed-out",
        lambda r: r.fire_when_due(derived.WORKFLOW_TIMEOUT, 1),
        "ChildWorkflowTimedOut",
        lambda e: e.child_workflow_timed_out.workflow_id,
        KID,
    ),
    (
        "canceled",
        lambda r: r.step(cancel_workflow()),
        "ChildWorkflowCanceled",
        lambda e: e.child_workflow_canceled.workflow_id,
        KID,
    ),
    (
        "terminated",
        lambda r: r.terminate(),
        "ChildWorkflowTerminated",
        lambda e: e.child_workflow_terminated.reason,
        "stop",
    ),
]


def report(parent: Run, child: Run) -> None:
    parent.apply(lambda t: children.report_child_close(t, child.state, child.history[-1]))


@pytest.mark.parametrize(
    ("end", "told", "field", "value"),
    [row[1:] for row in ENDINGS],
    ids=[row[0] for row in ENDINGS],
)
def test_each_way_a_child_ends_is_told_to_its_parent(
    end: Callable[[Run], object],
    told: str,
    field: Callable[[h.HistoryEvent], object],
    value: object,
) -> None:
    parent, child = with_child()
    started_id = parent.state.children[KID].started_id
    child.signal("wake")  # a decision task to close in, where the ending needs one
    end(child)
    assert not child.state.is_open
    report(parent, child)
    assert parent.last_types == [told, "DeciderScheduled"]
    event = parent.history[-2]
    attrs = getattr(event, event.WhichOneof("attributes") or "")
    assert (attrs.workflow_id, attrs.run_id, attrs.started_event_id) == (KID, KID_RUN, started_id)
    assert field(event) == value
    assert parent.state.children == {}
    assert fold(parent.key, parent.history).folded_part() == parent.state.folded_part()


def test_a_child_that_continued_as_new_is_reported_by_its_last_run() -> None:
    parent, child = with_child()
    started_id = parent.state.children[KID].started_id
    child.signal("wake")
    child.step(continue_as_new())
    [nxt_t] = child.new_runs
    ws = nxt_t.events[0].workflow_started
    # It stays its parent's child.
    assert (ws.parent_workflow_id, ws.parent_run_id, ws.parent_started_event_id) == (
        KEY.workflow_id,
        KEY.run_id,
        started_id,
    )
    nxt = Run.opened(nxt_t)
    nxt.step(complete_workflow("at last"))
    report(parent, nxt)
    assert parent.last_types == ["ChildWorkflowSuccess", "DeciderScheduled"]
    success = parent.history[-2].child_workflow_success
    assert (success.run_id, success.started_event_id, success.result) == (
        "kid-run-2",
        started_id,
        payload("at last"),
    )


def test_a_continue_as_new_is_no_end_to_tell() -> None:
    parent, child = with_child()
    child.signal("wake")
    child.step(continue_as_new())
    with pytest.raises(AssertionError):
        report(parent, child)
    parent.assert_refused_cleanly()
    assert KID in parent.state.children


def _parent_closed(parent: Run, child: Run) -> Run:
    parent.terminate()
    return child


def _a_stranger(parent: Run, child: Run) -> Run:
    return Run(RunKey(KEY.namespace, "stranger", "stranger-run")).start().terminate()


def _told_already(parent: Run, child: Run) -> Run:
    report(parent, child)
    assert parent.last_types == ["ChildWorkflowTerminated", "DeciderScheduled"]
    return child


@pytest.mark.parametrize(
    "deafen",
    [_parent_closed, _a_stranger, _told_already],
    ids=["parent-closed", "not-its-child", "told-already"],
)
def test_a_parent_that_closed_or_does_not_follow_the_child_hears_nothing(
    deafen: Callable[[Run, Run], Run],
) -> None:
    parent, child = with_child()
    child.terminate()
    closed = deafen(parent, child)
    length = len(parent.history)
    report(parent, closed)
    assert parent.last_types == []
    assert len(parent.history) == length


# --- the parent's close, applied to an open child ---------------------------------


def close_parent(parent: Run, how: str) -> ChildState:
    """Close the parent; the link to KID as it was before (the store's `before_children`)."""
    link = copy.deepcopy(parent.state.children[KID])
    if how == "terminated":
        parent.terminate()
    else:
        parent.decide(decider_turn(parent), complete_workflow())
    assert parent.state.status == how
    assert parent.state.children == {}
    return link


def apply_policy(child: Run, parent: RunState, link: ChildState) -> None:
    child.apply(lambda t: children.apply_parent_close(t, parent, link))


@pytest.mark.parametrize(
    ("policy", "appended", "status"),
    [
        (d.PARENT_CLOSE_POLICY_UNSPECIFIED, ["WorkflowTerminated"], "terminated"),
        (d.PARENT_CLOSE_POLICY_TERMINATE, ["WorkflowTerminated"], "terminated"),
        (
            d.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
            ["WorkflowCancelRequested", "DeciderScheduled"],
            "open",
        ),
        (d.PARENT_CLOSE_POLICY_ABANDON, [], "open"),
    ],
    ids=["unspecified", "terminate", "request-cancel", "abandon"],
)
@pytest.mark.parametrize("how", ["completed", "terminated"])
def test_each_parent_close_policy_does_its_thing_to_the_open_child(
    policy: d.ParentClosePolicy.ValueType, appended: list[str], status: str, how: str
) -> None:
    parent, child = with_child(policy)
    link = close_parent(parent, how)
    apply_policy(child, parent.state, link)
    assert child.last_types == appended
    assert child.state.status == status
    if appended:
        event = child.history[-len(appended)]
        attrs = getattr(event, event.WhichOneof("attributes") or "")
        assert attrs.identity == f"parent:{KEY.workflow_id}"
        assert attrs.reason == f"parent {KEY.workflow_id} closed ({how})"
    else:
        assert child.state.cancel_requested is False


@pytest.mark.parametrize(
    "policy",
    [d.PARENT_CLOSE_POLICY_TERMINATE, d.PARENT_CLOSE_POLICY_REQUEST_CANCEL],
    ids=["terminate", "request-cancel"],
)
def test_a_policy_reaching_a_child_that_already_closed_does_nothing(
    policy: d.ParentClosePolicy.ValueType,
) -> None:
    parent, child = with_child(policy)
    child.signal("wake")
    child.step(complete_workflow())
    link = close_parent(parent, "terminated")
    length = len(child.history)
    apply_policy(child, parent.state, link)
    assert child.last_types == []
    assert (len(child.history), child.state.status) == (length, "completed")


def test_a_cancel_policy_asks_a_child_only_once() -> None:
    parent, child = with_child(d.PARENT_CLOSE_POLICY_REQUEST_CANCEL)
    child.request_cancel()
    link = close_parent(parent, "completed")
    apply_policy(child, parent.state, link)
    assert child.last_types == []
    assert child.types.count("WorkflowCancelRequested") == 1

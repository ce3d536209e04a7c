"""Workflows that talk to workflows: starting a child, hearing of its close,
what a parent's close does to its open children, and signals to other runs.

The engine sees one run at a time. What a decision needs to know of other
runs (is that workflow id taken? which run does a signal reach?) the caller
reads beforehand into the DecisionContext; what it does to other runs (the
child's first events, a signal, a report to the parent, a policy applied to a
child) the store applies to those runs in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h

from . import external
from .context import DecisionContext
from .defaults import RegisteredWorkflowType, start_task_list, start_timeouts
from .events import CHILD_CLOSES
from .start import StartCommand, opened_run
from .state import ChildState, RunKey, RunState
from .transition import OutboundSignal, Transition

POLICIES = {
    d.PARENT_CLOSE_POLICY_UNSPECIFIED: "terminate",
    d.PARENT_CLOSE_POLICY_TERMINATE: "terminate",
    d.PARENT_CLOSE_POLICY_REQUEST_CANCEL: "request_cancel",
    d.PARENT_CLOSE_POLICY_ABANDON: "abandon",
}


def start_child(
    t: Transition, a: d.StartChildWorkflowDecision, completed: int, ctx: DecisionContext
) -> None:
    s = t.state
    cause = ""
    if a.workflow_id in s.children:
        cause = "CHILD_ID_ALREADY_IN_USE"
    elif a.workflow_id == s.workflow_id or a.workflow_id in ctx.open_workflows:
        cause = "WORKFLOW_ALREADY_RUNNING"
    if cause:
        t.emit(
            h.StartChildWorkflowFailedAttributes(
                workflow_id=a.workflow_id,
                workflow_type=a.workflow_type,
                cause=cause,
                decider_completed_event_id=completed,
            )
        )
        return
    name = a.workflow_type.name
    registered = ctx.child_types.get((name, a.workflow_type.version), RegisteredWorkflowType())
    version = a.workflow_type.version or registered.version
    task_list = start_task_list(registered, a.task_list, inherited=s.task_list)
    run_id = ctx.child_run_ids[a.workflow_id]
    policy = POLICIES.get(a.parent_close_policy, "terminate")
    attrs = h.ChildWorkflowStartedAttributes(
        workflow_id=a.workflow_id,
        run_id=run_id,
        workflow_type=c.WorkflowType(name=name, version=version),
        task_list=task_list,
        parent_close_policy=policy,
        decider_completed_event_id=completed,
    )
    if a.HasField("input"):
        attrs.input.CopyFrom(a.input)
    started = t.emit(attrs)
    execution, decider = start_timeouts(
        registered,
        ctx.defaults,
        _seconds(a, "execution_timeout"),
        _seconds(a, "decider_timeout"),
    )
    cmd = StartCommand(
        type_name=name,
        type_version=version,
        task_list=task_list,
        input=a.input if a.HasField("input") else None,
        execution_timeout=execution,
        decider_timeout=decider,
        identity=f"parent:{s.workflow_id}",
        definition=registered.definition,
        parent_workflow_id=s.workflow_id,
        parent_run_id=s.run_id,
        parent_started_id=started.event_id,
    )
    t.new_runs.append(opened_run(RunKey(s.namespace, a.workflow_id, run_id), t.now, cmd))


def _seconds(msg: d.StartChildWorkflowDecision, name: str) -> float | None:
    if not msg.HasField(name):  # type: ignore[arg-type]
        return None
    return float(getattr(msg, name).ToTimedelta().total_seconds())


def signal_external(
    t: Transition, a: d.SignalExternalWorkflowDecision, completed: int, ctx: DecisionContext
) -> None:
    s = t.state
    wid, run_id = a.execution.workflow_id, a.execution.run_id
    target, cause = ctx.signal_targets.get((wid, run_id), ("", "UNKNOWN_EXTERNAL_WORKFLOW"))
    to_itself = target == s.run_id
    # The API already asked `external.signal_refusal` of every target before the
    # decisions are applied, the run itself included; this asks the signal count
    # again because signals emitted earlier in this same answer count too. Events
    # emitted earlier in it that cross the event limit make `external.signal` below
    # raise, as it does for a signal from outside.
    if to_itself and external.signals_full(s, ctx.limits):
        target, cause = "", "SIGNAL_LIMIT_EXCEEDED"
    if not target:
        t.emit(
            h.SignalExternalWorkflowFailedAttributes(
                workflow_id=wid,
                run_id=run_id,
                signal_name=a.signal_name,
                cause=cause,
                decider_completed_event_id=completed,
            )
        )
        return
    t.emit(
        h.ExternalWorkflowSignaledAttributes(
            workflow_id=wid,
            run_id=target,
            signal_name=a.signal_name,
            decider_completed_event_id=completed,
        )
    )
    payload = a.input if a.HasField("input") else None
    identity = f"workflow:{s.workflow_id}"
    if to_itself:
        # Appended here, before a close later in the same answer can end the run.
        external.signal(t, a.signal_name, payload, identity, ctx.limits)
        return
    t.outbox.append(OutboundSignal(target, a.signal_name, payload, identity, ctx.limits))


def report_child_close(t: Transition, child: RunState, close: h.HistoryEvent) -> None:
    """Tell the parent (this run) how its child ended; nothing if the parent has
    closed or no longer follows that child."""
    s = t.state
    link = s.children.get(child.workflow_id)
    if not s.is_open or link is None:
        return
    wid, rid, sid = child.workflow_id, child.run_id, link.started_id
    kind = close.type
    if kind == "WorkflowSuccess":
        result = close.workflow_success.result
        t.emit(
            h.ChildWorkflowSuccessAttributes(
                workflow_id=wid, run_id=rid, started_event_id=sid, result=result
            )
        )
    elif kind == "WorkflowFailed":
        f = close.workflow_failed
        t.emit(
            h.ChildWorkflowFailedAttributes(
                workflow_id=wid,
                run_id=rid,
                started_event_id=sid,
                reason=f.reason,
                details=f.details,
            )
        )
    elif kind == "WorkflowTimedOut":
        t.emit(h.ChildWorkflowTimedOutAttributes(workflow_id=wid, run_id=rid, started_event_id=sid))
    elif kind == "WorkflowCanceled":
        details = close.workflow_canceled.details
        t.emit(
            h.ChildWorkflowCanceledAttributes(
                workflow_id=wid, run_id=rid, started_event_id=sid, details=details
            )
        )
    elif kind == "WorkflowTerminated":
        reason = close.workflow_terminated.reason
        t.emit(
            h.ChildWorkflowTerminatedAttributes(
                workflow_id=wid, run_id=rid, started_event_id=sid, reason=reason
            )
        )
    else:
        raise AssertionError(f"{kind} is not a close a parent hears of")


def children_to_close(
    before: Iterable[ChildState], events: Sequence[h.HistoryEvent]
) -> list[ChildState]:
    """The children a parent's close acts on: those open as it closed (open before
    the closing transition, or started by it, less those whose close it heard of),
    except those their policy abandons. The closing event drops the parent's
    children from its state, hence `before`."""
    links = {link.workflow_id: link for link in before}
    for e in events:
        if e.type == "ChildWorkflowStarted":
            a = e.child_workflow_started
            links[a.workflow_id] = ChildState(
                a.workflow_id, a.run_id, e.event_id, a.parent_close_policy
            )
        elif e.type in CHILD_CLOSES:
            links.pop(getattr(e, e.WhichOneof("attributes") or "").workflow_id, None)
    return [link for link in links.values() if link.parent_close_policy != "abandon"]


def apply_parent_close(t: Transition, parent: RunState, link: ChildState) -> None:
    """The parent closed: do to this open child what its policy says."""
    if not t.state.is_open:
        return
    identity = f"parent:{parent.workflow_id}"
    reason = f"parent {parent.workflow_id} closed ({parent.status})"
    if link.parent_close_policy == "terminate":
        external.terminate(t, reason, None, identity)
    elif link.parent_close_policy == "request_cancel":
        external.request_cancel(t, reason, identity)

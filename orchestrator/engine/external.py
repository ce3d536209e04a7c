"""Commands from outside the run: signal, cancel request, terminate."""

from __future__ import annotations

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import history_pb2 as h

from .errors import ResourceExhausted
from .limits import Limits
from .state import RunState
from .tokens import check_open
from .transition import Transition


def signals_full(state: RunState, limits: Limits) -> bool:
    """The run holds as many signals as a run may take."""
    return state.signals >= limits.signals_per_run


def signal_refusal(state: RunState, limits: Limits) -> str:
    """Why the run takes no signal now ("" when it takes one): the signal limit
    first, then the event limit. The signal limit's one home: a signal from
    outside (`signal` below), and a decider's signal to any run, its own
    included (asked by the API of every target before the decisions are
    applied, and again by `children.signal_external`), all ask here."""
    if signals_full(state, limits):
        return f"run has {state.signals} signals: the limit is {limits.signals_per_run} per run"
    if state.next_event_id > limits.events_per_run:
        return f"run has {state.next_event_id - 1} events: the limit is {limits.events_per_run}"
    return ""


def signal(
    t: Transition, name: str, payload: c.Payload | None, identity: str, limits: Limits
) -> None:
    check_open(t.state)
    refusal = signal_refusal(t.state, limits)
    if refusal:
        raise ResourceExhausted(refusal)
    attrs = h.SignalAttributes(signal_name=name, identity=identity)
    if payload is not None:
        attrs.input.CopyFrom(payload)
    t.emit(attrs)


def request_cancel(t: Transition, reason: str, identity: str) -> None:
    check_open(t.state)
    if t.state.cancel_requested:
        return  # already asked: the decider has been told once
    t.emit(h.WorkflowCancelRequestedAttributes(reason=reason, identity=identity))


def terminate(t: Transition, reason: str, details: c.Payload | None, identity: str) -> None:
    check_open(t.state)
    attrs = h.WorkflowTerminatedAttributes(reason=reason, identity=identity)
    if details is not None:
        attrs.details.CopyFrom(details)
    t.emit(attrs)

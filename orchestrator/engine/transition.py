"""A transition: the events one command appends to one run, applied as they go."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import history_pb2 as h

from . import caller
from .events import TRIGGERS, evolve, make_event
from .limits import Limits
from .state import RunState

T = TypeVar("T")


def duration(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


@dataclass(frozen=True)
class OutboundSignal:
    """A signal this transition sends to another run: the store appends it to
    that run in the same transaction."""

    run_id: str
    signal_name: str
    input: c.Payload | None
    identity: str
    limits: Limits
    """The receiving run's limits (on signals and events) still apply."""


@dataclass
class Transition:
    state: RunState
    now: datetime
    events: list[h.HistoryEvent] = field(default_factory=list)
    new_runs: list[Transition] = field(default_factory=list)
    """Runs this command opens besides its own (continue-as-new, children)."""
    outbox: list[OutboundSignal] = field(default_factory=list)
    state_changed: bool = False
    """True when the state changed without an event (a heartbeat)."""
    _wake_decider: bool = False
    principal: str = field(default_factory=caller.principal.get)
    """Stamped on every event this transition appends (HistoryEvent.principal)."""

    def emit(self, attributes: Message) -> h.HistoryEvent:
        if not self.state.is_open:
            raise AssertionError("nothing may be appended after a close event")
        event = make_event(self.state.next_event_id, self.now, attributes)
        if self.principal:
            event.principal = self.principal
        evolve(self.state, event)
        self.events.append(event)
        if event.type in TRIGGERS:
            self._wake_decider = True
        return event

    @contextmanager
    def caused_by(self, principal: str) -> Iterator[None]:
        """Stamp the events appended inside with `principal`: a task handed to a
        waiting poll is started by that poller, inside another caller's commit."""
        saved, self.principal = self.principal, principal
        try:
            yield
        finally:
            self.principal = saved

    def wake_decider(self) -> None:
        self._wake_decider = True

    def finish(self) -> Transition:
        """Append DeciderScheduled if something triggered it and none is outstanding.

        "Outstanding" means scheduled and not yet started: one may be queued
        behind a started decision task, but never two (seed 002).
        """
        s = self.state
        if self._wake_decider and s.is_open and not s.decider.scheduled_id:
            self.emit(
                h.DeciderScheduledAttributes(
                    task_list=s.task_list, start_to_close_timeout=duration(s.decider_timeout)
                )
            )
        self._wake_decider = False
        return self


def apply(t: Transition, command: Callable[[Transition], T]) -> T:
    """Run one command in `t`: the one way every command is applied, by the store
    and by the engine tests alike. The command appends its events, then `finish`
    schedules the decider if an event called for it and none is outstanding.

    The caller makes `t` (a fresh `Transition(state, now)`) so that it keeps the
    transition even when the command is refused: the store drops the changed
    state then, and a test checks that nothing was appended."""
    result = command(t)
    t.finish()
    return result

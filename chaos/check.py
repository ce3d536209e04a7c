"""The verdict on a chaos run, from the histories alone: for every workflow,
event ids 1…n without a gap, one `WorkflowStarted`, each activity succeeded
exactly once, the signal recorded once however often it was sent, the timer
fired once, the run closed with the right result. Anything else is counted as
lost, duplicated, stuck or wrong, with a line saying where."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from chaos.workflow import ACTIVITIES, SIGNAL, TIMER, expected
from sdk import Event

CLOSED = frozenset(
    {
        "WorkflowSuccess",
        "WorkflowFailed",
        "WorkflowTimedOut",
        "WorkflowCanceled",
        "WorkflowTerminated",
        "WorkflowContinuedAsNew",
    }
)


@dataclass
class Verdict:
    workflows: int = 0
    events: int = 0
    lost: int = 0
    duplicated: int = 0
    stuck: int = 0
    wrong: int = 0
    activity_attempts: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.stuck or self.wrong)

    def add(self, other: Verdict) -> None:
        self.workflows += other.workflows
        self.events += other.events
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.stuck += other.stuck
        self.wrong += other.wrong
        self.activity_attempts += other.activity_attempts
        self.problems += other.problems


def check_history(n: int, workflow_id: str, events: list[Event]) -> Verdict:
    """The verdict on run `n`'s whole history."""
    v = Verdict(workflows=1, events=len(events))

    def problem(counter: str, text: str) -> None:
        setattr(v, counter, getattr(v, counter) + 1)
        v.problems.append(f"{workflow_id}: {text}")

    ids = [e.event_id for e in events]
    if ids != list(range(1, len(events) + 1)):
        problem("lost", f"event ids not contiguous: {_gaps(ids)}")
    types = Counter(e.type for e in events)
    if types["WorkflowStarted"] != 1:
        problem("duplicated", f"{types['WorkflowStarted']} WorkflowStarted events")

    activity_of = {
        e.event_id: e.get("activity_id", "") for e in events if e.type == "ActivityScheduled"
    }
    v.activity_attempts = len(activity_of)
    successes = Counter(
        activity_of.get(e.get("scheduled_event_id", 0), "?")
        for e in events
        if e.type == "ActivitySuccess"
    )
    signals = sum(1 for e in events if e.type == "Signal" and e.get("signal_name") == SIGNAL)
    fired = sum(1 for e in events if e.type == "TimerExpired" and e.get("timer_id") == TIMER)
    timers = sum(1 for e in events if e.type == "TimerScheduled" and e.get("timer_id") == TIMER)

    closed = [e for e in events if e.type in CLOSED]
    counts = {"signal": signals, "timer": fired, "timer start": timers}
    counts |= {f"activity {aid} success": successes[aid] for aid in ACTIVITIES}
    for what, count in counts.items():
        if count > 1:
            problem("duplicated", f"{what} {count} times")
        elif count == 0 and closed:  # an open run may yet get it: it counts as stuck
            problem("lost", f"no {what}")
    if not closed:
        last = events[-1].type if events else "nothing"
        problem("stuck", f"still open after {len(events)} events (last: {last})")
        return v
    if len(closed) > 1 or closed[0] is not events[-1]:
        problem("duplicated", f"events after the close: {[e.type for e in events[-3:]]}")
    close, want = closed[0], expected(n)
    if close.type != "WorkflowSuccess":
        problem("wrong", f"closed {close.type}: {close.attributes}")
    elif close.get("result") != want:
        problem("wrong", f"result {close.get('result')!r}, expected {want!r}")
    return v


def _gaps(ids: list[int]) -> str:
    out = []
    for want, got in enumerate(ids, start=1):
        if want != got:
            out.append(f"#{want} is {got}")
        if len(out) == 3:
            break
    return ", ".join(out)

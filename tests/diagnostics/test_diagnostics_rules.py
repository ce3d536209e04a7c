"""The rules of `weft doctor` on facts made by hand (orchestrator/diagnostics):
what is reported, what is not, and the chain a blocked lock holder is found by."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.diagnostics import rules
from orchestrator.diagnostics.facts import (
    Facts,
    HeldTask,
    ListRef,
    LockPlace,
    LongRun,
    OverdueDeadline,
    WaitingList,
)
from orchestrator.diagnostics.findings import (
    DEADLINE_OVERDUE,
    HISTORY_NEAR_LIMIT,
    LOCK_DEADLOCK,
    LOCK_HOLDER_BLOCKED,
    NO_POLLER,
    SCHEDULE_MISSED_SLOTS,
)
from orchestrator.diagnostics.schedules import schedule_findings
from orchestrator.engine.state import RunKey
from orchestrator.store.schedules import ScheduleRow
from tests.schedule_rows import schedule_row

NOW = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)
A, B, C, D = (RunKey("default", f"wf-{x}", f"run-{x}") for x in "abcd")
ORDERS = ListRef("decision", "orders")
IMAGES = ListRef("activity", "images")


def facts(**kw: object) -> Facts:
    out = Facts(
        namespace="default", now=NOW, no_poller_after=60, overdue_after=30, events_limit=100
    )
    for key, value in kw.items():
        setattr(out, key, value)
    return out


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def place(run: RunKey, seconds: float = 100) -> LockPlace:
    return LockPlace(run, ago(seconds))


def kinds(found: list[rules.Finding]) -> list[str]:
    return [f.kind for f in found]


def test_nothing_is_reported_of_a_healthy_namespace() -> None:
    assert rules.diagnose(facts()) == []


def test_tasks_on_a_list_nobody_polled_are_reported_with_their_runs() -> None:
    waiting = [WaitingList(IMAGES, 3, ago(300), (A, B))]
    [found] = rules.diagnose(facts(waiting=waiting, last_polled={IMAGES: ago(120)}))
    assert found.kind == NO_POLLER
    assert found.task_list == IMAGES and found.count == 3 and found.runs == (A, B)
    assert found.since == ago(300)
    assert "3 activity tasks" in found.explanation and "for 2m00s" in found.explanation
    assert "weft runner" in found.action and "images" in found.action


def test_a_list_never_polled_is_reported_and_one_polled_lately_is_not() -> None:
    never = rules.diagnose(facts(waiting=[WaitingList(ORDERS, 1, ago(90), (A,))]))
    assert kinds(never) == [NO_POLLER]
    assert "no poller has been seen there" in never[0].explanation
    assert "weft decider" in never[0].action
    lately = facts(waiting=[WaitingList(ORDERS, 1, ago(90), (A,))], last_polled={ORDERS: ago(59)})
    assert rules.diagnose(lately) == []


def test_overdue_deadlines_are_one_finding_with_their_runs_and_kinds() -> None:
    overdue = [
        OverdueDeadline(A, "timer", ago(600)),
        OverdueDeadline(A, "activity_stc", ago(60)),
        OverdueDeadline(B, "timer", ago(45)),
    ]
    [found] = rules.diagnose(facts(overdue=overdue, overdue_count=7))
    assert found.kind == DEADLINE_OVERDUE
    assert found.runs == (A, B) and found.count == 7 and found.since == ago(600)
    assert "activity_stc, timer" in found.explanation and "10m00s" in found.explanation


def test_runs_near_the_history_limit_are_reported_each() -> None:
    found = rules.diagnose(facts(long_runs=[LongRun(A, 95), LongRun(B, 80)]))
    assert kinds(found) == [HISTORY_NEAR_LIMIT, HISTORY_NEAR_LIMIT]
    assert found[0].runs == (A,) and "95%" in found[0].explanation
    assert "continue" in found[0].action.lower()


def test_a_waiter_behind_a_holder_that_waits_for_a_holder_without_poller() -> None:
    """C waits for L2 held by B; B waits for L1 held by A; A's decision task waits
    on a list nobody polls: one finding, from L2, with the whole chain."""
    f = facts(
        holders={"L1": place(A), "L2": place(B)},
        waiters={"L1": [place(B, 50)], "L2": [place(C, 40)]},
        open_runs={A.run_id, B.run_id},
        holder_tasks={A.run_id: [HeldTask(ORDERS, ago(90))]},
    )
    [found] = rules.lock_findings(f)
    assert found.kind == LOCK_HOLDER_BLOCKED and found.lock_name == "L2"
    assert found.chain == (("L2", B), ("L1", A))
    assert found.runs == (C, B, A) and found.count == 1
    assert "decision task list 'orders'" in found.explanation
    assert "weft decider" in found.action and "weft locks release L1" in found.action


def test_a_holder_that_is_busy_is_not_blocked() -> None:
    f = facts(
        holders={"L1": place(A)},
        waiters={"L1": [place(B)]},
        open_runs={A.run_id},
        # Its task is young: the list may simply not have been polled yet.
        holder_tasks={A.run_id: [HeldTask(ORDERS, ago(5))]},
    )
    assert rules.diagnose(f) == []


def test_a_closed_holder_and_an_overdue_holder_are_blocked() -> None:
    closed = facts(holders={"L1": place(A)}, waiters={"L1": [place(B)]})
    [found] = rules.lock_findings(closed)
    assert "closed or gone" in found.explanation
    assert found.action.startswith("force-release 'L1'")
    late = facts(
        holders={"L1": place(A)},
        waiters={"L1": [place(B)]},
        open_runs={A.run_id},
        holder_overdue={A.run_id: ago(300)},
    )
    [found] = rules.lock_findings(late)
    assert "overdue" in found.explanation and "DEADLINE_OVERDUE" in found.action


def test_a_cycle_is_one_deadlock_and_a_waiter_outside_it_is_blocked_by_it() -> None:
    f = facts(
        holders={"L1": place(A), "L2": place(B)},
        waiters={"L1": [place(B), place(D)], "L2": [place(A)]},
        open_runs={A.run_id, B.run_id},
    )
    found = rules.diagnose(f)
    assert kinds(found) == [LOCK_DEADLOCK, LOCK_HOLDER_BLOCKED]
    deadlock, blocked = found
    assert {r.run_id for r in deadlock.runs} == {A.run_id, B.run_id}
    assert {lock for lock, _ in deadlock.chain} == {"L1", "L2"}
    assert "waits for" in deadlock.explanation and "weft locks release" in deadlock.action
    assert blocked.lock_name == "L1" and D in blocked.runs
    assert "LOCK_DEADLOCK" in blocked.explanation


def test_findings_come_most_urgent_first_and_name_their_runs() -> None:
    f = facts(
        waiting=[WaitingList(IMAGES, 1, ago(300), (C,))],
        long_runs=[LongRun(D, 99)],
        holders={"L1": place(A), "L2": place(B)},
        waiters={"L1": [place(B)], "L2": [place(A)]},
        open_runs={A.run_id, B.run_id},
    )
    found = rules.diagnose(f)
    assert kinds(found) == [LOCK_DEADLOCK, NO_POLLER, HISTORY_NEAR_LIMIT]
    assert [x.involves(C.run_id) for x in found] == [False, True, False]
    assert found[0].involves(A.run_id)


def schedule(
    name: str, *, created: float, last: float | None = None, every: float = 60
) -> ScheduleRow:
    return schedule_row(
        ago(created),
        name=name,
        task_list="",
        every=every,
        timezone="UTC",
        overlap="skip",
        catch_up_window=3600,
        jitter=0,
        last_slot=ago(last) if last is not None else None,
        missed=2,
    )


def test_a_schedule_whose_slots_are_not_started_is_reported() -> None:
    late = schedule("nightly", created=600)  # ten slots due, none handled
    on_time = schedule("hourly", created=600, last=10)  # the last slot was handled
    just_due = schedule("fresh", created=50)  # its first slot is due now: not late yet
    [found] = schedule_findings(facts(schedules=[late, on_time, just_due]))
    assert found.kind == SCHEDULE_MISSED_SLOTS and found.schedule == "nightly"
    assert found.count == 10 and "2 slot(s) missed so far" in found.explanation
    assert "weft nodes" in found.action
    assert schedule_findings(facts()) == []

"""The rules of `weft doctor`: from facts read in one pass (`facts.Facts`) to
findings, each with the runs involved, one line on what is wrong and one on
what to do. Pure: no I/O, no clock (`facts.now` is given)."""

from __future__ import annotations

from datetime import datetime

from orchestrator.diagnostics.facts import Facts, ListRef, LockPlace
from orchestrator.diagnostics.findings import (
    DEADLINE_OVERDUE,
    HISTORY_NEAR_LIMIT,
    KINDS,
    LOCK_DEADLOCK,
    LOCK_HOLDER_BLOCKED,
    NO_POLLER,
    Finding,
)
from orchestrator.diagnostics.schedules import schedule_findings
from orchestrator.engine.state import RunKey

NEAR_LIMIT = 0.8
"""A run whose history holds this share of the event limit is reported."""
SAMPLE_RUNS = 20
"""Runs named in one finding; `count` says how many there are in all."""
MAX_CHAIN = 50
"""Lock chains are followed this far (a longer one is reported as it stands)."""


def diagnose(facts: Facts) -> list[Finding]:
    found = [
        *lock_findings(facts),
        *unpolled_lists(facts),
        *overdue_deadlines(facts),
        *near_history_limit(facts),
        *schedule_findings(facts),
    ]
    return sorted(found, key=lambda f: KINDS.index(f.kind))


def unpolled(facts: Facts, ref: ListRef) -> float | None:
    """Seconds since a poller was last seen on `ref` (inf: never), or None when
    one was seen within the no-poller time."""
    last = facts.last_polled.get(ref)
    if last is None:
        return float("inf")
    idle = (facts.now - last).total_seconds()
    return idle if idle >= facts.no_poller_after else None


def unpolled_lists(facts: Facts) -> list[Finding]:
    out = []
    for waiting in facts.waiting:
        idle = unpolled(facts, waiting.ref)
        if idle is None:
            continue
        what = "decision" if waiting.ref.kind == "decision" else "activity"
        tasks = f"{waiting.count} {what} task{'s' if waiting.count != 1 else ''}"
        out.append(
            Finding(
                kind=NO_POLLER,
                namespace=facts.namespace,
                runs=waiting.runs[:SAMPLE_RUNS],
                count=waiting.count,
                since=waiting.oldest,
                task_list=waiting.ref,
                explanation=(
                    f"{tasks} waited on task list {waiting.ref.task_list!r} for up to"
                    f" {_ago(facts.now, waiting.oldest)}, and {_seen(idle)}"
                ),
                action=_start_worker(facts.namespace, waiting.ref),
            )
        )
    return out


def overdue_deadlines(facts: Facts) -> list[Finding]:
    if not facts.overdue:
        return []
    earliest = min(d.due for d in facts.overdue)
    kinds = sorted({d.kind for d in facts.overdue})
    runs = tuple(dict.fromkeys(d.run for d in facts.overdue))
    count = max(facts.overdue_count, len(facts.overdue))
    return [
        Finding(
            kind=DEADLINE_OVERDUE,
            namespace=facts.namespace,
            runs=runs[:SAMPLE_RUNS],
            count=count,
            since=earliest,
            explanation=(
                f"{count} deadline{'s' if count != 1 else ''} ({', '.join(kinds)}) should"
                f" have fired up to {_ago(facts.now, earliest)} ago and have not:"
                " no node's deadline scanner is firing them"
            ),
            action=(
                "check that a `weft server` runs on this database and look in its log for"
                " timers.scan_failed (database errors); a node fires overdue deadlines"
                " when it starts"
            ),
        )
    ]


def near_history_limit(facts: Facts) -> list[Finding]:
    out = []
    limit = facts.events_limit
    for long in facts.long_runs:
        share = long.history_length / limit
        out.append(
            Finding(
                kind=HISTORY_NEAR_LIMIT,
                namespace=facts.namespace,
                runs=(long.run,),
                count=long.history_length,
                explanation=(
                    f"{long.run.workflow_id} has {long.history_length} history events,"
                    f" {share:.0%} of the limit of {limit}: at the limit only a close"
                    " decision is accepted"
                ),
                action=(
                    "have its decider continue it as new (ContinueAsNew; decision tasks"
                    " suggest it near the limit), or raise the server's event limit"
                ),
            )
        )
    return out


# -- locks ----------------------------------------------------------------------------


def lock_findings(facts: Facts) -> list[Finding]:
    """Waiters behind a holder that cannot move, following the holder's own
    wait for another lock to the run at the end of the chain; and cycles."""
    waiting_for = _waiting_for(facts)
    blocking = {
        place.run.run_id for name, place in facts.holders.items() if facts.waiters.get(name)
    }
    out: list[Finding] = []
    cycles: set[frozenset[str]] = set()
    for name in sorted(facts.waiters):
        holder = facts.holders.get(name)
        waiters = facts.waiters[name]
        if holder is None or not waiters:
            continue  # granted between the reads, or free for an instant
        chain = [(name, holder)]
        seen = {holder.run.run_id}
        reason: str | None = None
        while len(chain) < MAX_CHAIN:
            run = chain[-1][1].run
            reason = _stuck(facts, run)
            if reason is not None:
                break
            nxt = next((n for n in waiting_for.get(run.run_id, ()) if n in facts.holders), None)
            if nxt is None:
                break  # the holder is doing something: not blocked
            chain.append((nxt, facts.holders[nxt]))
            if facts.holders[nxt].run.run_id in seen:
                start = next(i for i, (_, p) in enumerate(chain) if p.run == facts.holders[nxt].run)
                cycle = chain[start + 1 :]
                key = frozenset(p.run.run_id for _, p in cycle)
                if key not in cycles:
                    cycles.add(key)
                    out.append(_deadlock(facts, cycle))
                reason = "waits in a lock cycle (reported as LOCK_DEADLOCK)"
                break
            seen.add(facts.holders[nxt].run.run_id)
        if reason is None:
            continue
        # A lock whose every waiter holds a blocked lock itself is part of a longer
        # chain, reported from that chain's first lock.
        heads = [w for w in waiters if w.run.run_id not in blocking]
        if not heads:
            continue
        out.append(_blocked(facts, name, waiters, chain, reason))
    return out


def _waiting_for(facts: Facts) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name in sorted(facts.waiters):
        for place in facts.waiters[name]:
            out.setdefault(place.run.run_id, []).append(name)
    return out


def _stuck(facts: Facts, run: RunKey) -> str | None:
    """Why a lock holder cannot move on its own, or None."""
    if run.run_id not in facts.open_runs:
        return "is closed or gone and cannot release it"
    for task in facts.holder_tasks.get(run.run_id, []):
        idle = unpolled(facts, task.ref)
        if idle is not None and (facts.now - task.created).total_seconds() >= (
            facts.no_poller_after
        ):
            return f"has a task waiting on {_list(task.ref)}, where {_seen(idle)}"
    due = facts.holder_overdue.get(run.run_id)
    if due is not None:
        return f"has a deadline overdue by {_ago(facts.now, due)} (see DEADLINE_OVERDUE)"
    return None


def _blocked(
    facts: Facts,
    name: str,
    waiters: list[LockPlace],
    chain: list[tuple[str, LockPlace]],
    reason: str,
) -> Finding:
    links = [f"{lock!r} held by {p.run.workflow_id}" for lock, p in chain]
    path = ", which waits for ".join(links)
    count = len(waiters)
    last_lock, last = chain[-1]
    if last.run.run_id not in facts.open_runs:
        action = f"force-release {last_lock!r}: weft locks release {last_lock}"
    elif "task waiting" in reason:
        ref = next(
            t.ref
            for t in facts.holder_tasks.get(last.run.run_id, [])
            if unpolled(facts, t.ref) is not None
        )
        action = (
            f"{_start_worker(facts.namespace, ref)}; or, as a last resort, force-release"
            f" {last_lock!r} (weft locks release {last_lock})"
        )
    elif "overdue" in reason:
        action = "get a node's deadline scanner going again (see DEADLINE_OVERDUE)"
    else:
        action = "break the lock cycle (see LOCK_DEADLOCK)"
    runs = [w.run for w in waiters] + [p.run for _, p in chain]
    return Finding(
        kind=LOCK_HOLDER_BLOCKED,
        namespace=facts.namespace,
        runs=tuple(dict.fromkeys(runs))[:SAMPLE_RUNS],
        count=count,
        since=waiters[0].since,
        lock_name=name,
        chain=tuple((lock, p.run) for lock, p in chain),
        explanation=(
            f"{count} run{'s' if count != 1 else ''} wait{'' if count != 1 else 's'} for"
            f" lock {path}, which {reason}"
        ),
        action=action,
    )


def _deadlock(facts: Facts, cycle: list[tuple[str, LockPlace]]) -> Finding:
    # Each link is a lock and its holder; the holder waits for the next link's lock.
    steps = [
        f"{p.run.workflow_id} holds {lock!r} and waits for {cycle[(i + 1) % len(cycle)][0]!r}"
        for i, (lock, p) in enumerate(cycle)
    ]
    first = cycle[0][0]
    since = min((w.since for lock, _ in cycle for w in facts.waiters.get(lock, [])), default=None)
    return Finding(
        kind=LOCK_DEADLOCK,
        namespace=facts.namespace,
        runs=tuple(p.run for _, p in cycle)[:SAMPLE_RUNS],
        count=len(cycle),
        since=since,
        lock_name=first,
        chain=tuple((lock, p.run) for lock, p in cycle),
        explanation="runs wait for each other's locks: " + "; ".join(steps),
        action=(
            f"force-release one lock of the cycle (weft locks release {first}),"
            " or terminate one of the runs"
        ),
    )


# -- wording --------------------------------------------------------------------------


def _list(ref: ListRef) -> str:
    return f"{ref.kind} task list {ref.task_list!r}"


def _seen(idle: float) -> str:
    if idle == float("inf"):
        return "no poller has been seen there"
    return f"no poller has been seen there for {_span(idle)}"


def _start_worker(namespace: str, ref: ListRef) -> str:
    command = "weft decider" if ref.kind == "decision" else "weft runner"
    worker = "decider" if ref.kind == "decision" else "activity runner"
    return (
        f"start a {worker} polling {ref.task_list!r} in namespace {namespace!r}"
        f" ({command} --namespace {namespace} --task-list {ref.task_list} …),"
        " or check that the running ones poll that list and namespace and are not all busy"
    )


def _ago(now: datetime, then: datetime) -> str:
    return _span(max(0.0, (now - then).total_seconds()))


def _span(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 2 * 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"

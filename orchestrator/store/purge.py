"""One pass of the retention purge: delete the closed runs that their policy
no longer keeps, with their history (STEPS.md "Retention").

Never an open run; never a closed run that an open run still names as its
parent, nor one whose parent is still kept (a child is not expired while an
ancestor is kept). Runs are ranked within their group (namespace and the
policy's `hash`, else the workflow type) by close time, newest first.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from orchestrator.engine import retention
from orchestrator.engine.state import RunState

from .rows import aware
from .schema import history_events, namespaces, runs

# pg_try_advisory_xact_lock key: one node purges at a time.
PURGE_LOCK_KEY = 0x77656674_70757267  # "weftpurg"
_BATCH = 1000
MIN_AGE = 600.0
"""Seconds a closed run is kept whatever its policy (but `disabled`) says."""


@dataclass
class _Closed:
    run_id: str
    namespace: str
    group: str
    closed_at: float
    parent_run_id: str
    policy: retention.Policy


async def take_purge_lock(conn: AsyncConnection) -> bool:
    """PostgreSQL: whether this transaction may purge (no other node is)."""
    return bool(
        await conn.scalar(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": PURGE_LOCK_KEY})
    )


async def delete_runs(conn: AsyncConnection, doomed: list[str]) -> int:
    """Delete closed runs with their history. Their request ids stay: a start
    retried with one answers with the run it started, never a second run."""
    if doomed:
        await conn.execute(delete(history_events).where(history_events.c.run_id.in_(doomed)))
        await conn.execute(delete(runs).where(runs.c.run_id.in_(doomed), runs.c.status != "open"))
    return len(doomed)


async def expired_runs(conn: AsyncConnection, now: datetime) -> list[str]:
    """The closed runs their policy no longer keeps, at most a batch (read only).
    A run closed less than MIN_AGE ago is kept whatever its policy says, unless
    that is `disabled`, so that a client waiting for its result still finds it."""
    defaults = {
        r.name: retention.parse(r.retention).policy
        for r in await conn.execute(select(namespaces.c.name, namespaces.c.retention))
    }
    system = retention.parse(retention.SYSTEM_DEFAULT).policy
    parents_of_open = set(
        (
            await conn.execute(
                select(runs.c.parent_run_id)
                .where(runs.c.status == "open", runs.c.parent_run_id != "")
                .distinct()
            )
        ).scalars()
    )
    closed: dict[str, _Closed] = {}
    rows = await conn.execute(
        select(
            runs.c.run_id,
            runs.c.namespace,
            runs.c.workflow_type,
            runs.c.close_time,
            runs.c.parent_run_id,
            runs.c.state,
        ).where(runs.c.status != "open")
    )
    for r in rows:
        state = RunState.from_json(r.state)
        closed[r.run_id] = _Closed(
            run_id=r.run_id,
            namespace=r.namespace,
            group=state.retention_hash or r.workflow_type,
            closed_at=aware(r.close_time).timestamp(),
            parent_run_id=r.parent_run_id,
            policy=retention.parse(state.retention).policy,
        )

    async def policy_of(run_id: str, namespace: str, depth: int = 0) -> retention.Policy:
        """The run's policy with `parent` and `system` filled in."""
        ns_default = defaults.get(namespace, system)
        run = closed.get(run_id)
        if run is not None:
            own, parent_id = run.policy, run.parent_run_id
        else:  # an open parent: read its state
            raw = await conn.scalar(select(runs.c.state).where(runs.c.run_id == run_id))
            if raw is None:
                return ns_default
            state = RunState.from_json(raw)
            own, parent_id = retention.parse(state.retention).policy, state.parent_run_id
        parent: retention.Policy = ns_default
        if parent_id and depth < 10:
            parent = await policy_of(parent_id, namespace, depth + 1)
        return _fill(own, parent, ns_default)

    by_group: dict[tuple[str, str], list[_Closed]] = defaultdict(list)
    for run in closed.values():
        by_group[(run.namespace, run.group)].append(run)
    expired: set[str] = set()
    stamp = now.timestamp()
    for members in by_group.values():
        members.sort(key=lambda m: (-m.closed_at, m.run_id))
        for rank, run in enumerate(members):
            if run.run_id in parents_of_open:
                continue
            policy = await policy_of(run.run_id, run.namespace)
            age = stamp - run.closed_at
            if age < MIN_AGE and not isinstance(policy, retention.Disabled):
                continue
            if not retention.keeps(policy, rank, age, _filled_already):
                expired.add(run.run_id)
    # A child goes only with (or after) its parent.
    doomed = []
    for rid in sorted(expired):
        parent_id = closed[rid].parent_run_id
        if not parent_id or parent_id in expired or not await _exists(conn, parent_id):
            doomed.append(rid)
    return doomed[:_BATCH]


def _fill(
    policy: retention.Policy, parent: retention.Policy, system: retention.Policy
) -> retention.Policy:
    if isinstance(policy, retention.Ref):
        return system if policy.name == "system" else parent
    if isinstance(policy, retention.Combine):
        return retention.Combine(policy.op, tuple(_fill(p, parent, system) for p in policy.parts))
    return policy


def _filled_already(name: str) -> retention.Policy:
    raise AssertionError(f"{name} should have been filled in by _fill")


async def _exists(conn: AsyncConnection, run_id: str) -> bool:
    return await conn.scalar(select(runs.c.run_id).where(runs.c.run_id == run_id)) is not None

"""`weft doctor`: AdminService.DiagnoseNamespace, the `problems` of
DescribeWorkflow, and the numbers behind the `weft_stuck_findings` gauge.

The store reads the facts (`store/diagnostics.py`), this node adds the poller
sightings it has not written yet (a worker polling this very node is not
"unseen" for the seconds before the next flush), and the pure rules
(`orchestrator.diagnostics.rules`) turn them into findings.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.diagnostics import rules
from orchestrator.diagnostics.facts import Facts, ListRef
from orchestrator.diagnostics.findings import Finding
from orchestrator.dispatch.pollers import PollerSightings
from orchestrator.engine.errors import NotFound
from orchestrator.engine.limits import Limits
from orchestrator.engine.state import RunState
from orchestrator.store.diagnostics import Bounds
from orchestrator.store.rows import RunRow, TaskListKey, utcnow
from orchestrator.store.store import Store
from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import diagnostics_pb2 as dg

from . import validate
from .common import Ctx, ServiceBase, timestamp
from .errors import grpc_errors

NO_POLLER_AFTER = timedelta(seconds=60)
"""A task list nobody polled for this long, with tasks as old, is reported."""
OVERDUE_AFTER = timedelta(seconds=30)
"""A deadline this far past due has not fired: the scanner fires them within a second."""
_KINDS = {"decision": c.TASK_LIST_KIND_DECISION, "activity": c.TASK_LIST_KIND_ACTIVITY}


class Doctor:
    def __init__(self, store: Store, pollers: PollerSightings, limits: Limits) -> None:
        self._store = store
        self._pollers = pollers
        self._limits = limits

    def _bounds(self, no_poller_after: timedelta) -> Bounds:
        return Bounds(
            no_poller_after=no_poller_after.total_seconds(),
            overdue_after=OVERDUE_AFTER.total_seconds(),
            events_limit=self._limits.events_per_run,
            near_limit=rules.NEAR_LIMIT,
        )

    async def namespace(
        self, namespace: str, no_poller_after: timedelta = NO_POLLER_AFTER
    ) -> tuple[list[Finding], bool]:
        """(findings, whether a bound cut the reading short)."""
        facts = await self._store.diagnostics.namespace_facts(
            namespace, utcnow(), self._bounds(no_poller_after)
        )
        self._add_own_sightings(facts)
        return rules.diagnose(facts), facts.truncated

    async def run(self, row: RunRow, state: RunState) -> list[Finding]:
        """The findings that name this run (none for a closed one)."""
        if row.status != "open":
            return []
        facts = await self._store.diagnostics.run_facts(
            row.key, row.history_length, bool(state.locks), utcnow(), self._bounds(NO_POLLER_AFTER)
        )
        self._add_own_sightings(facts)
        return [f for f in rules.diagnose(facts) if f.involves(row.key.run_id)]

    def _add_own_sightings(self, facts: Facts) -> None:
        refs: set[ListRef] = {w.ref for w in facts.waiting}
        refs |= {task.ref for held in facts.holder_tasks.values() for task in held}
        keys = {TaskListKey(facts.namespace, ref.kind, ref.task_list): ref for ref in refs}
        for key, at in self._pollers.latest(set(keys)).items():
            ref, latest = keys[key], datetime.fromtimestamp(at, UTC)
            if ref not in facts.last_polled or facts.last_polled[ref] < latest:
                facts.last_polled[ref] = latest


def finding_proto(f: Finding) -> dg.Finding:
    out = dg.Finding(
        kind=dg.FindingKind.Value(f"FINDING_KIND_{f.kind}"),
        namespace=f.namespace,
        executions=[
            c.WorkflowExecution(workflow_id=r.workflow_id, run_id=r.run_id) for r in f.runs
        ],
        count=f.count,
        lock_name=f.lock_name,
        chain=[
            dg.LockLink(
                lock_name=lock,
                holder=c.WorkflowExecution(workflow_id=r.workflow_id, run_id=r.run_id),
            )
            for lock, r in f.chain
        ],
        schedule=f.schedule,
        explanation=f.explanation,
        action=f.action,
    )
    if f.task_list is not None:
        out.task_list = f.task_list.task_list
        out.task_list_kind = _KINDS[f.task_list.kind]
    if f.since is not None:
        out.since.CopyFrom(timestamp(f.since))
    return out


class DiagnosticsAdmin(ServiceBase):
    @property
    def doctor(self) -> Doctor:
        return Doctor(self._store, self._pollers, self._settings.limits)

    @grpc_errors
    async def DiagnoseNamespace(
        self, req: a.DiagnoseNamespaceRequest, ctx: Ctx
    ) -> a.DiagnoseNamespaceResponse:
        ns = validate.namespace(req.namespace)
        after = validate.optional_seconds(req, "no_poller_after")
        # "default" is there from the start: a fresh server is healthy, not unknown.
        known = ns == validate.DEFAULT_NAMESPACE
        if not known and not await self._store.diagnostics.namespace_known(ns):
            raise NotFound(f"namespace {ns!r} is not registered and has no runs or pollers")
        found, truncated = await self.doctor.namespace(
            ns, NO_POLLER_AFTER if after is None else timedelta(seconds=after)
        )
        return a.DiagnoseNamespaceResponse(
            findings=[finding_proto(f) for f in found], truncated=truncated
        )

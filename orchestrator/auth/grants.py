"""Roles and grants: which role may call which RPC, in one table.

A grant is one role in one namespace ("*": every namespace, admin only),
optionally narrowed: a worker to task lists, a starter or a signaler to
workflow types, a signaler to signal names. `admin` may call everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ADMIN, WORKER, STARTER, SIGNALER, READER = "admin", "worker", "starter", "signaler", "reader"
ROLES = (ADMIN, WORKER, STARTER, SIGNALER, READER)
EVERY_NAMESPACE = "*"

# The roles besides admin that may call each RPC. An RPC missing here is admin's
# only (a test checks that every RPC of both services is decided here).
CALLERS: dict[str, frozenset[str]] = {
    # WorkflowService: starting and steering runs
    "StartWorkflow": frozenset({STARTER}),
    "SignalWithStartWorkflow": frozenset({STARTER}),
    "SignalWorkflow": frozenset({STARTER, SIGNALER}),
    "RequestCancelWorkflow": frozenset({STARTER}),
    "TerminateWorkflow": frozenset(),
    # reading runs (a decider pages a long history through GetWorkflowHistory)
    "GetWorkflowHistory": frozenset({STARTER, READER, WORKER}),
    "DescribeWorkflow": frozenset({STARTER, READER}),
    "ListWorkflows": frozenset({STARTER, READER}),
    "CountWorkflows": frozenset({STARTER, READER}),
    # workers
    "PollForDecisionTask": frozenset({WORKER}),
    "RespondDecisionTaskCompleted": frozenset({WORKER}),
    "RespondDecisionTaskFailed": frozenset({WORKER}),
    "PollForActivityTask": frozenset({WORKER}),
    "RecordActivityHeartbeat": frozenset({WORKER}),
    "RespondActivityTaskCompleted": frozenset({WORKER}),
    "RespondActivityTaskFailed": frozenset({WORKER}),
    "RespondActivityTaskCanceled": frozenset({WORKER}),
    "DescribeTaskList": frozenset({WORKER, READER}),
    "ListTaskLists": frozenset({READER}),
    "RegisterWorkflowType": frozenset({WORKER}),
    "RegisterActivityType": frozenset({WORKER}),
    # worker sessions (a worker narrowed to task lists registers on those only)
    "RegisterWorker": frozenset({WORKER}),
    "RecordWorkerHeartbeat": frozenset({WORKER}),
    "UnregisterWorker": frozenset({WORKER}),
    "ListWorkers": frozenset({WORKER, READER}),
    # AdminService
    "ListLocks": frozenset({READER}),
    "ForceReleaseLock": frozenset(),
    "RegisterNamespace": frozenset(),
    "DescribeNamespace": frozenset({READER, STARTER, WORKER}),
    "ReplayWorkflow": frozenset(),
    "PurgeClosedRuns": frozenset(),
    "CreateApiKey": frozenset(),
    "AddPrincipal": frozenset(),
    "ListCredentials": frozenset(),
    "RevokeCredential": frozenset(),
    # the cluster: any reader may see its nodes
    "ListNodes": frozenset({READER}),
    # a reader of a namespace may see what is stuck in it (read-only)
    "DiagnoseNamespace": frozenset({READER}),
    # schedules: changing one is admin's (it starts runs of any type); reading is not
    "CreateSchedule": frozenset(),
    "DescribeSchedule": frozenset({READER, STARTER}),
    "ListSchedules": frozenset({READER, STARTER}),
    "UpdateSchedule": frozenset(),
    "PauseSchedule": frozenset(),
    "UnpauseSchedule": frozenset(),
    "TriggerSchedule": frozenset(),
    "BackfillSchedule": frozenset(),
    "DeleteSchedule": frozenset(),
}

# Calls that act on every namespace at once: only an admin of "*" may make them.
EVERY_NAMESPACE_RPCS = frozenset({"PurgeClosedRuns"})

# Calls written to the server log as audit lines (who, where, what).
AUDITED = frozenset(
    {
        "TerminateWorkflow",
        "ForceReleaseLock",
        "ReplayWorkflow",
        "PurgeClosedRuns",
        "RegisterNamespace",
        "CreateApiKey",
        "AddPrincipal",
        "RevokeCredential",
        "CreateSchedule",
        "UpdateSchedule",
        "PauseSchedule",
        "UnpauseSchedule",
        "TriggerSchedule",
        "BackfillSchedule",
        "DeleteSchedule",
    }
)


class Refused(Exception):
    """The grant does not cover the call; the message says what it lacks."""


@dataclass(frozen=True)
class Grant:
    namespace: str
    role: str
    task_lists: frozenset[str] = field(default_factory=frozenset)
    workflow_types: frozenset[str] = field(default_factory=frozenset)
    signal_names: frozenset[str] = field(default_factory=frozenset)

    def covers_namespace(self, namespace: str) -> bool:
        return self.namespace in (EVERY_NAMESPACE, namespace)

    def check(self, rpc: str, scope: Scope) -> None:
        """Raise `Refused` unless this grant allows `rpc` on `scope`."""
        if rpc in EVERY_NAMESPACE_RPCS and not (
            self.role == ADMIN and self.namespace == EVERY_NAMESPACE
        ):
            raise Refused(f"{rpc} acts on every namespace: it needs admin of '*'")
        if scope.namespace is not None and not self.covers_namespace(scope.namespace):
            raise Refused(
                f"the credential is for namespace {self.namespace!r}, not {scope.namespace!r}"
            )
        if self.role == ADMIN:
            return
        if self.role not in CALLERS.get(rpc, frozenset()):
            raise Refused(f"role {self.role!r} may not call {rpc}")
        _within("task list", scope.task_list, self.task_lists)
        _within("workflow type", scope.workflow_type, self.workflow_types)
        _within("signal", scope.signal_name, self.signal_names)


@dataclass(frozen=True)
class Scope:
    """What a call touches, as far as grants care. None: not part of this call."""

    namespace: str | None = None
    task_list: str | None = None
    workflow_type: str | None = None
    signal_name: str | None = None


def _within(what: str, value: str | None, allowed: frozenset[str]) -> None:
    if value is not None and allowed and value not in allowed:
        raise Refused(f"the credential is limited to {what}s {sorted(allowed)}, not {value!r}")

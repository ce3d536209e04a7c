"""Stuck-run diagnostics (`weft doctor`): the findings the server reports for a
namespace (`AsyncClient.diagnose`) or for one run (`WorkflowDescription.problems`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.message import Message

from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import diagnostics_pb2 as dg
from sdk.durations import duration
from sdk.events import rfc3339


@dataclass(frozen=True)
class Finding:
    """One stuck thing. `kind` is one of NO_POLLER, DEADLINE_OVERDUE,
    LOCK_HOLDER_BLOCKED, LOCK_DEADLOCK, HISTORY_NEAR_LIMIT, SCHEDULE_MISSED_SLOTS;
    `executions` are (workflow id, run id) pairs, the stuck ones first, at most a
    few dozen; `count` is what the kind counts (waiting tasks, overdue deadlines,
    lock waiters, runs of a cycle, history events); `chain` is (lock, holder
    workflow id, holder run id) from the waiters' lock to the run that blocks it."""

    kind: str
    namespace: str
    explanation: str
    action: str
    executions: list[tuple[str, str]] = field(default_factory=list)
    count: int = 0
    task_list: str = ""
    task_list_kind: str = ""
    """"decision" or "activity" when `task_list` is set."""
    lock_name: str = ""
    chain: list[tuple[str, str, str]] = field(default_factory=list)
    schedule: str = ""
    since: datetime | None = None

    @classmethod
    def from_proto(cls, msg: dg.Finding) -> Finding:
        kind: str = dg.FindingKind.Name(msg.kind)
        list_kind: str = c.TaskListKind.Name(msg.task_list_kind)
        return cls(
            kind=kind.removeprefix("FINDING_KIND_"),
            namespace=msg.namespace,
            explanation=msg.explanation,
            action=msg.action,
            executions=[(e.workflow_id, e.run_id) for e in msg.executions],
            count=msg.count,
            task_list=msg.task_list,
            task_list_kind=list_kind.removeprefix("TASK_LIST_KIND_").lower()
            if msg.task_list
            else "",
            lock_name=msg.lock_name,
            chain=[(ln.lock_name, ln.holder.workflow_id, ln.holder.run_id) for ln in msg.chain],
            schedule=msg.schedule,
            since=msg.since.ToDatetime(tzinfo=UTC) if msg.HasField("since") else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "explanation": self.explanation,
            "action": self.action,
            "executions": [{"workflow_id": w, "run_id": r} for w, r in self.executions],
            "count": self.count,
            "task_list": self.task_list or None,
            "task_list_kind": self.task_list_kind or None,
            "lock_name": self.lock_name or None,
            "chain": [
                {"lock_name": lock, "workflow_id": w, "run_id": r} for lock, w, r in self.chain
            ],
            "schedule": self.schedule or None,
            "since": rfc3339(self.since) if self.since else None,
        }


@dataclass(frozen=True)
class Diagnosis:
    """A namespace's findings, the most urgent first; `truncated`: a kind had
    more than the server lists."""

    namespace: str
    findings: list[Finding]
    truncated: bool = False

    @property
    def healthy(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "healthy": self.healthy,
            "truncated": self.truncated,
            "findings": [f.to_json() for f in self.findings],
        }


class DiagnosticCalls:
    """Mixed into `AsyncClient`, which provides `namespace` and `rpc`."""

    namespace: str

    async def rpc(self, method: str, request: Message, *, timeout: timedelta | None = None) -> Any:
        raise NotImplementedError

    async def diagnose(self, *, no_poller_after: timedelta | None = None) -> Diagnosis:
        """What looks stuck in this client's namespace (`weft doctor`): tasks on
        task lists nobody polls (for `no_poller_after`, default 60 s), overdue
        deadlines, lock waiters behind a blocked holder, histories near the limit."""
        req = a.DiagnoseNamespaceRequest(
            namespace=self.namespace, no_poller_after=duration(no_poller_after)
        )
        resp = await self.rpc("DiagnoseNamespace", req)
        return Diagnosis(
            self.namespace, [Finding.from_proto(f) for f in resp.findings], resp.truncated
        )

"""What the authentication tests share: the callers and their keys, a request per
RPC aimed at the namespace `default` and the run WF, and the fixtures (a server with
authentication required, and `setup`: the callers' keys and the open run WF).

Used by test_auth_matrix.py, test_auth_principals.py and test_auth_worker_sessions.py;
a test module takes the fixtures by binding `server_config` and `setup` in its namespace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from orchestrator.auth import keys
from orchestrator.config import ServerConfig
from orchestrator.engine.state import RunKey
from orchestrator.engine.tokens import TaskToken
from orchestrator.server import Server
from orchestrator.store.credentials import KEY, CredentialRow
from orchestrator.store.rows import TaskListKey
from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import schedules_pb2 as sc
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import dur, payload, wait_until

OK = grpc.StatusCode.OK
DENIED = grpc.StatusCode.PERMISSION_DENIED
UNAUTH = grpc.StatusCode.UNAUTHENTICATED
NOT_FOUND = grpc.StatusCode.NOT_FOUND
WF = "wf-target"  # the open run most calls aim at: type "wt", task list "tl-a"

# The callers: (namespace, role, narrowing, state).
CALLERS: dict[str, dict[str, Any]] = {
    "admin*": {"namespace": "*", "role": "admin"},
    "admin": {"namespace": "default", "role": "admin"},
    "worker": {"namespace": "default", "role": "worker"},
    "starter": {"namespace": "default", "role": "starter"},
    "signaler": {"namespace": "default", "role": "signaler"},
    "reader": {"namespace": "default", "role": "reader"},
    # outside the grant
    "worker-tl-b": {"namespace": "default", "role": "worker", "task_lists": ("tl-b",)},
    "starter-other-type": {"namespace": "default", "role": "starter", "workflow_types": ("x",)},
    "signaler-other-signal": {"namespace": "default", "role": "signaler", "signal_names": ("x",)},
    "admin-other-ns": {"namespace": "other", "role": "admin"},
    "starter-other-ns": {"namespace": "other", "role": "starter"},
    # bad credentials
    "revoked": {"namespace": "*", "role": "admin", "revoked": True},
    "expired": {"namespace": "*", "role": "admin", "expired": True},
}
BAD_CREDENTIALS = ("none", "garbage", "unknown-key", "wrong-secret", "revoked", "expired")


class Setup:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.keys: dict[str, str] = {}
        self.run_id = ""

    async def make_keys(self) -> None:
        store = self.server._store
        assert store is not None
        secret_key = await store.credentials.auth_secret()
        now = datetime.now(UTC)
        for who, spec in CALLERS.items():
            key_id, secret, whole = keys.new_key()
            await store.credentials.add(
                CredentialRow(
                    id=key_id,
                    kind=KEY,
                    subject="",
                    secret_hash=keys.keyed_hash(secret_key, secret),
                    name=who,
                    namespace=spec["namespace"],
                    role=spec["role"],
                    task_lists=spec.get("task_lists", ()),
                    workflow_types=spec.get("workflow_types", ()),
                    signal_names=spec.get("signal_names", ()),
                    created_at=now - timedelta(hours=2),
                    created_by="test",
                    expires_at=now - timedelta(hours=1) if spec.get("expired") else None,
                )
            )
            if spec.get("revoked"):
                await store.credentials.revoke(key_id, now)
            self.keys[who] = whole
        self.keys["garbage"] = "not a key"
        self.keys["unknown-key"] = "weft.k_000000000000.abc"
        good = self.keys["admin*"].split(".")
        self.keys["wrong-secret"] = f"{good[0]}.{good[1]}.{'A' * len(good[2])}"

    def metadata(self, who: str) -> tuple[tuple[str, str], ...]:
        if who == "none":
            return ()
        return (("authorization", f"Bearer {self.keys[who]}"),)

    def token(self, kind: str, task_list: str, namespace: str = "default") -> bytes:
        service = self.server._service
        assert service is not None
        # A task that was never started: the handler says NOT_FOUND once let in.
        return service._tokens.encode(
            TaskToken(RunKey(namespace, WF, self.run_id), kind, 999, 1000, 1, task_list)
        )

    async def history_length(self) -> int:
        store = self.server._store
        assert store is not None
        return len(await store.read_history(self.run_id, 1, None, 100_000))


def requests(setup: Setup) -> dict[str, Callable[[], Any]]:
    """A request per RPC, aimed at the namespace `default` and the run WF."""
    ex = c.WorkflowExecution(workflow_id=WF)
    missing = c.WorkflowExecution(workflow_id="no-such-workflow")
    wtype = c.WorkflowType(name="wt")
    n = iter(range(10**6))

    def start(workflow_id: str = "") -> s.StartWorkflowRequest:
        return s.StartWorkflowRequest(
            namespace="default",
            workflow_id=workflow_id or f"started-{next(n)}",
            workflow_type=wtype,
            task_list="tl-a",
        )

    return {
        "StartWorkflow": start,
        "SignalWithStartWorkflow": lambda: s.SignalWithStartWorkflowRequest(
            start=start(WF), signal_name="go", signal_input=payload(1)
        ),
        "SignalWorkflow": lambda: s.SignalWorkflowRequest(
            namespace="default", execution=ex, signal_name="go"
        ),
        "RequestCancelWorkflow": lambda: s.RequestCancelWorkflowRequest(
            namespace="default", execution=ex
        ),
        "TerminateWorkflow": lambda: s.TerminateWorkflowRequest(
            namespace="default", execution=missing
        ),
        "GetWorkflowHistory": lambda: s.GetWorkflowHistoryRequest(
            namespace="default", execution=ex
        ),
        "DescribeWorkflow": lambda: s.DescribeWorkflowRequest(namespace="default", execution=ex),
        "ListWorkflows": lambda: s.ListWorkflowsRequest(namespace="default"),
        "CountWorkflows": lambda: s.CountWorkflowsRequest(namespace="default"),
        "ListTaskLists": lambda: s.ListTaskListsRequest(namespace="default"),
        "PollForDecisionTask": lambda: s.PollForDecisionTaskRequest(
            namespace="default", task_list="tl-none"
        ),
        "RespondDecisionTaskCompleted": lambda: s.RespondDecisionTaskCompletedRequest(
            task_token=setup.token("decision", "tl-a")
        ),
        "RespondDecisionTaskFailed": lambda: s.RespondDecisionTaskFailedRequest(
            task_token=setup.token("decision", "tl-a")
        ),
        "PollForActivityTask": lambda: s.PollForActivityTaskRequest(
            namespace="default", task_list="tl-none"
        ),
        "RecordActivityHeartbeat": lambda: s.RecordActivityHeartbeatRequest(
            task_token=setup.token("activity", "tl-a")
        ),
        "RespondActivityTaskCompleted": lambda: s.RespondActivityTaskCompletedRequest(
            task_token=setup.token("activity", "tl-a")
        ),
        "RespondActivityTaskFailed": lambda: s.RespondActivityTaskFailedRequest(
            task_token=setup.token("activity", "tl-a")
        ),
        "RespondActivityTaskCanceled": lambda: s.RespondActivityTaskCanceledRequest(
            task_token=setup.token("activity", "tl-a")
        ),
        "DescribeTaskList": lambda: s.DescribeTaskListRequest(
            namespace="default", task_list="tl-a", kind=c.TASK_LIST_KIND_DECISION
        ),
        "RegisterWorkflowType": lambda: s.RegisterWorkflowTypeRequest(
            namespace="default", workflow_type=wtype, default_task_list="tl-a"
        ),
        "RegisterActivityType": lambda: s.RegisterActivityTypeRequest(
            namespace="default", activity_type=c.ActivityType(name="at"), default_task_list="tl-a"
        ),
        "ListLocks": lambda: a.ListLocksRequest(namespace="default"),
        "ForceReleaseLock": lambda: a.ForceReleaseLockRequest(
            namespace="default", lock_name="nobody-holds-this"
        ),
        "RegisterNamespace": lambda: a.RegisterNamespaceRequest(name="default"),
        "DescribeNamespace": lambda: a.DescribeNamespaceRequest(name="default"),
        "ReplayWorkflow": lambda: a.ReplayWorkflowRequest(
            namespace="default", execution=missing, mode="last"
        ),
        "PurgeClosedRuns": lambda: a.PurgeClosedRunsRequest(),
        "CreateApiKey": lambda: a.CreateApiKeyRequest(
            grant=a.Grant(namespace="default", role="reader")
        ),
        "AddPrincipal": lambda: a.AddPrincipalRequest(
            subject=f"client-{next(n)}", grant=a.Grant(namespace="default", role="reader")
        ),
        "ListCredentials": lambda: a.ListCredentialsRequest(),
        "RevokeCredential": lambda: a.RevokeCredentialRequest(id="k_000000000000"),
        "RegisterWorker": lambda: s.RegisterWorkerRequest(
            namespace="default",
            identity="w",
            task_lists=[s.WorkerTaskList(name="tl-a", kind=c.TASK_LIST_KIND_ACTIVITY)],
        ),
        "RecordWorkerHeartbeat": lambda: s.RecordWorkerHeartbeatRequest(
            namespace="default", worker_session_id="no-such-session"
        ),
        "UnregisterWorker": lambda: s.UnregisterWorkerRequest(
            namespace="default", worker_session_id="no-such-session"
        ),
        "ListWorkers": lambda: s.ListWorkersRequest(namespace="default", task_list="tl-a"),
        "ListNodes": lambda: a.ListNodesRequest(),
        "DiagnoseNamespace": lambda: a.DiagnoseNamespaceRequest(namespace="default"),
        "CreateSchedule": lambda: sc.CreateScheduleRequest(
            namespace="default",
            schedule=sc.Schedule(
                name=f"sched-{next(n)}", workflow_type="wt", every=dur(86400), paused=True
            ),
        ),
        "DescribeSchedule": lambda: sc.DescribeScheduleRequest(namespace="default", name="nope"),
        "ListSchedules": lambda: sc.ListSchedulesRequest(namespace="default"),
        "UpdateSchedule": lambda: sc.UpdateScheduleRequest(
            namespace="default",
            schedule=sc.Schedule(name="nope", workflow_type="wt", every=dur(60)),
        ),
        "PauseSchedule": lambda: sc.PauseScheduleRequest(namespace="default", name="nope"),
        "UnpauseSchedule": lambda: sc.UnpauseScheduleRequest(namespace="default", name="nope"),
        "TriggerSchedule": lambda: sc.TriggerScheduleRequest(namespace="default", name="nope"),
        "BackfillSchedule": lambda: sc.BackfillScheduleRequest(
            namespace="default",
            name="nope",
            start_time=Timestamp(seconds=1_700_000_000),
            end_time=Timestamp(seconds=1_700_000_600),
        ),
        "DeleteSchedule": lambda: sc.DeleteScheduleRequest(namespace="default", name="nope"),
    }


@pytest.fixture
def server_config(db_url: str, request: pytest.FixtureRequest) -> ServerConfig:
    # Short, so the matrix's allowed polls answer quickly; tests that park a poll
    # ask for a long one (`@pytest.mark.long_poll`) so that it is still there.
    marker = request.node.get_closest_marker("long_poll")
    long_poll = float(marker.args[0]) if marker else 0.3
    return ServerConfig(db_url=db_url, listen="127.0.0.1:0", long_poll=long_poll, auth=True)


async def parked(server: Server, kind: str, task_list: str) -> None:
    """Until a poll of `task_list` waits on the server, ready to be handed a task."""
    key = TaskListKey("default", kind, task_list)

    async def waiting() -> bool:
        return any(t.take is not None for t in server._wakeups._pollers.get(key, ()))

    await wait_until(waiting, timeout=10)


@pytest.fixture
async def setup(server: Server) -> AsyncIterator[Setup]:
    it = Setup(server)
    await it.make_keys()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        started = await sg.WorkflowServiceStub(channel).StartWorkflow(
            s.StartWorkflowRequest(
                namespace="default",
                workflow_id=WF,
                workflow_type=c.WorkflowType(name="wt"),
                task_list="tl-a",
            ),
            metadata=it.metadata("admin"),
        )
        it.run_id = started.run_id
    yield it

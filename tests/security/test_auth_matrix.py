"""Every RPC of WorkflowService and AdminService, by every caller, → the exact
status, on SQLite and on PostgreSQL, through a real gRPC server started with
authentication required. Where a call is refused, the run it aimed at is
unchanged.

The expected table below is written out from the issue's roles (not derived
from `orchestrator.auth.grants`), so a change to the rules has to change it too.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
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
from sdk.api.weft.v1 import admin_pb2_grpc as ag
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

# Which callers each RPC lets in (the rest: PERMISSION_DENIED, or UNAUTHENTICATED
# for bad credentials). Admins of the namespace and of "*" may call everything,
# except that PurgeClosedRuns (every namespace at once) needs admin of "*".
ADMINS = {"admin*", "admin"}
ALLOWED: dict[str, set[str]] = {
    "StartWorkflow": ADMINS | {"starter"},
    "SignalWithStartWorkflow": ADMINS | {"starter"},
    "SignalWorkflow": ADMINS | {"starter", "signaler"},
    "RequestCancelWorkflow": ADMINS | {"starter"},
    "TerminateWorkflow": ADMINS,
    "GetWorkflowHistory": ADMINS | {"starter", "reader", "worker"},
    "DescribeWorkflow": ADMINS | {"starter", "reader"},
    "ListWorkflows": ADMINS | {"starter", "reader"},
    "CountWorkflows": ADMINS | {"starter", "reader"},
    "PollForDecisionTask": ADMINS | {"worker"},
    "RespondDecisionTaskCompleted": ADMINS | {"worker"},
    "RespondDecisionTaskFailed": ADMINS | {"worker"},
    "PollForActivityTask": ADMINS | {"worker"},
    "RecordActivityHeartbeat": ADMINS | {"worker"},
    "RespondActivityTaskCompleted": ADMINS | {"worker"},
    "RespondActivityTaskFailed": ADMINS | {"worker"},
    "RespondActivityTaskCanceled": ADMINS | {"worker"},
    "DescribeTaskList": ADMINS | {"worker", "reader"},
    "ListTaskLists": ADMINS | {"reader"},
    "RegisterWorkflowType": ADMINS | {"worker"},
    "RegisterActivityType": ADMINS | {"worker"},
    "ListLocks": ADMINS | {"reader"},
    "ForceReleaseLock": ADMINS,
    "RegisterNamespace": ADMINS,
    "DescribeNamespace": ADMINS | {"reader", "starter", "worker"},
    "ReplayWorkflow": ADMINS,
    "PurgeClosedRuns": {"admin*"},
    "CreateApiKey": ADMINS,
    "AddPrincipal": ADMINS,
    "ListCredentials": ADMINS | {"admin-other-ns"},  # it lists only its own namespace's
    # An admin of another namespace is told "not found", as for an id that does not exist.
    "RevokeCredential": ADMINS | {"admin-other-ns"},
    "RegisterWorker": ADMINS | {"worker"},
    "RecordWorkerHeartbeat": ADMINS | {"worker"},
    "UnregisterWorker": ADMINS | {"worker"},
    "ListWorkers": ADMINS | {"worker", "reader"},
    # The cluster's nodes are no namespace's: any admin or reader may see them.
    "ListNodes": ADMINS | {"reader", "admin-other-ns"},
    "DiagnoseNamespace": ADMINS | {"reader"},
    "CreateSchedule": ADMINS,
    "DescribeSchedule": ADMINS | {"reader", "starter"},
    "ListSchedules": ADMINS | {"reader", "starter"},
    "UpdateSchedule": ADMINS,
    "PauseSchedule": ADMINS,
    "UnpauseSchedule": ADMINS,
    "TriggerSchedule": ADMINS,
    "BackfillSchedule": ADMINS,
    "DeleteSchedule": ADMINS,
}
# What an allowed call answers (the requests aim at things that make it fail
# harmlessly where succeeding would disturb the other cases).
ANSWER: dict[str, grpc.StatusCode] = {
    "TerminateWorkflow": NOT_FOUND,  # a workflow that does not exist
    "ForceReleaseLock": NOT_FOUND,  # a lock nobody holds
    "ReplayWorkflow": grpc.StatusCode.INVALID_ARGUMENT,  # no replay point: let in, then refused
    "RevokeCredential": NOT_FOUND,  # an id that does not exist
    "RespondDecisionTaskCompleted": NOT_FOUND,  # a token of a task that is not started
    "RespondDecisionTaskFailed": NOT_FOUND,
    "RecordActivityHeartbeat": NOT_FOUND,
    "RespondActivityTaskCompleted": NOT_FOUND,
    "RespondActivityTaskFailed": NOT_FOUND,
    "RespondActivityTaskCanceled": NOT_FOUND,
    "RecordWorkerHeartbeat": NOT_FOUND,  # a session that does not exist
    # a schedule that does not exist (CreateSchedule makes a paused one per call)
    "DescribeSchedule": NOT_FOUND,
    "UpdateSchedule": NOT_FOUND,
    "PauseSchedule": NOT_FOUND,
    "UnpauseSchedule": NOT_FOUND,
    "TriggerSchedule": NOT_FOUND,
    "BackfillSchedule": NOT_FOUND,
    "DeleteSchedule": NOT_FOUND,
}
# Callers refused by the grant's narrowing, beyond the role table.
NARROWED_OUT: dict[str, set[str]] = {
    "worker-tl-b": {"PollForDecisionTask", "PollForActivityTask", "DescribeTaskList"}
    | {"GetWorkflowHistory", "RegisterWorkflowType", "RegisterActivityType"}
    | {"RegisterWorker", "ListWorkers"}
    | {m for m in ALLOWED if m.startswith(("Respond", "RecordActivity"))},
    "starter-other-type": {
        "StartWorkflow",
        "SignalWithStartWorkflow",
        "SignalWorkflow",
        "RequestCancelWorkflow",
    },
    "signaler-other-signal": {"SignalWorkflow"},
}


ADMIN_RPCS = frozenset(a.DESCRIPTOR.services_by_name["AdminService"].methods_by_name)


def expected(rpc: str, who: str) -> grpc.StatusCode:
    if who in BAD_CREDENTIALS:
        return UNAUTH
    base = who
    if who in NARROWED_OUT:
        if rpc in NARROWED_OUT[who]:
            return DENIED
        base = who.split("-")[0]
    if base in ALLOWED[rpc] or who in ALLOWED[rpc]:
        return ANSWER.get(rpc, OK)
    return DENIED


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


def test_every_rpc_is_in_the_table() -> None:
    services = [
        s.DESCRIPTOR.services_by_name["WorkflowService"],
        a.DESCRIPTOR.services_by_name["AdminService"],
    ]
    assert {m.name for svc in services for m in svc.methods} == set(ALLOWED)


async def test_every_rpc_by_every_caller(setup: Setup) -> None:
    wrong: list[str] = []
    build = requests(setup)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stubs = (sg.WorkflowServiceStub(channel), ag.AdminServiceStub(channel))
        for rpc in ALLOWED:
            call = getattr(stubs[1] if rpc in ADMIN_RPCS else stubs[0], rpc)
            for who in (*CALLERS, "none", "garbage", "unknown-key", "wrong-secret"):
                want = expected(rpc, who)
                before = await setup.history_length()
                try:
                    await call(build[rpc](), metadata=setup.metadata(who), timeout=10)
                    got = OK
                    detail = ""
                except grpc.aio.AioRpcError as exc:
                    got, detail = exc.code(), exc.details() or ""
                if got != want:
                    wrong.append(f"{rpc} by {who}: {got.name} (wanted {want.name}) {detail}")
                if want in (DENIED, UNAUTH) and await setup.history_length() != before:
                    wrong.append(f"{rpc} by {who} was refused but appended to the run")
                if want in (DENIED, UNAUTH) and not detail:
                    wrong.append(f"{rpc} by {who}: refused without a message")
    assert not wrong, "\n".join(wrong)


async def test_a_refused_start_opens_no_run(setup: Setup) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        for who in ("reader", "signaler", "worker", "starter-other-ns", "none"):
            request = s.StartWorkflowRequest(
                namespace="default",
                workflow_id=f"never-{who}",
                workflow_type=c.WorkflowType(name="wt"),
                task_list="tl-a",
            )
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.StartWorkflow(request, metadata=setup.metadata(who))
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.DescribeWorkflow(
                    s.DescribeWorkflowRequest(
                        namespace="default",
                        execution=c.WorkflowExecution(workflow_id=request.workflow_id),
                    ),
                    metadata=setup.metadata("admin"),
                )
            assert info.value.code() == NOT_FOUND


async def test_terminate_is_refused_to_every_role_but_admin(setup: Setup) -> None:
    """With the real target (the open run): refused, and the run stays open and unchanged."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        request = s.TerminateWorkflowRequest(
            namespace="default", execution=c.WorkflowExecution(workflow_id=WF)
        )
        before = await setup.history_length()
        for who in ("worker", "starter", "signaler", "reader", "admin-other-ns"):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.TerminateWorkflow(request, metadata=setup.metadata(who))
            assert info.value.code() == DENIED, who
        assert await setup.history_length() == before
        await stub.TerminateWorkflow(request, metadata=setup.metadata("admin"))
        assert await setup.history_length() == before + 1


async def test_events_record_the_principal_next_to_the_identity(setup: Setup) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        await stub.SignalWorkflow(
            s.SignalWorkflowRequest(
                namespace="default",
                execution=c.WorkflowExecution(workflow_id=WF),
                signal_name="go",
                identity="pretending-to-be-someone-else",
            ),
            metadata=setup.metadata("signaler"),
        )
        history = await stub.GetWorkflowHistory(
            s.GetWorkflowHistoryRequest(
                namespace="default", execution=c.WorkflowExecution(workflow_id=WF)
            ),
            metadata=setup.metadata("reader"),
        )
        described = await stub.DescribeWorkflow(
            s.DescribeWorkflowRequest(
                namespace="default", execution=c.WorkflowExecution(workflow_id=WF)
            ),
            metadata=setup.metadata("reader"),
        )
    assert described.started_by == f"key:{setup.keys['admin'].split('.')[1]}"
    signal = [e for e in history.events if e.type == "Signal"][-1]
    key_id = setup.keys["signaler"].split(".")[1]
    assert signal.principal == f"key:{key_id}"
    assert signal.signal.identity == "pretending-to-be-someone-else"
    first = history.events[0]
    assert first.principal == f"key:{setup.keys['admin'].split('.')[1]}"


async def test_keys_are_stored_only_as_keyed_hashes(setup: Setup) -> None:
    store = setup.server._store
    assert store is not None
    rows = await store.credentials.find(None)
    dump = json.dumps([r.secret_hash for r in rows])
    for who in CALLERS:
        secret = setup.keys[who].split(".")[2]
        assert secret not in dump
        assert keys.keyed_hash(await store.credentials.auth_secret(), secret) in dump


@pytest.mark.long_poll(1)
async def test_request_rate_and_polls_per_principal(server_config: ServerConfig) -> None:
    node = Server(replace(server_config, max_requests_per_principal=5, max_polls_per_principal=1))
    await node.start()
    try:
        it = Setup(node)
        await it.make_keys()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as channel:
            stub = sg.WorkflowServiceStub(channel)
            # A bucket of two seconds' worth (10 requests), then RESOURCE_EXHAUSTED...
            codes = []
            for _ in range(14):
                try:
                    await stub.ListWorkflows(
                        s.ListWorkflowsRequest(namespace="default"), metadata=it.metadata("reader")
                    )
                    codes.append(OK)
                except grpc.aio.AioRpcError as exc:
                    codes.append(exc.code())
            assert codes[:10] == [OK] * 10
            assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes[10:]
            # ...for that principal only.
            await stub.ListWorkflows(
                s.ListWorkflowsRequest(namespace="default"), metadata=it.metadata("starter")
            )
            # One poll waiting at a time per principal: a second is refused at once.
            poll = s.PollForActivityTaskRequest(namespace="default", task_list="quiet")
            first = asyncio.ensure_future(
                stub.PollForActivityTask(poll, metadata=it.metadata("worker"))
            )
            await parked(node, "activity", "quiet")
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.PollForActivityTask(poll, metadata=it.metadata("worker"))
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "polls waiting" in (info.value.details() or "")
            await first  # the first poll answers empty at the end of its long poll
            await stub.PollForActivityTask(poll, metadata=it.metadata("worker"))
    finally:
        await node.stop(grace=0.5)


@pytest.mark.long_poll(10)
async def test_a_task_handed_to_a_waiting_poll_is_started_by_the_poller(setup: Setup) -> None:
    """The start's commit hands the decision task to the parked poll: DeciderStarted
    is appended in the starter's write, but the worker started it."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        poll = asyncio.ensure_future(
            stub.PollForDecisionTask(
                s.PollForDecisionTaskRequest(namespace="default", task_list="handed"),
                metadata=setup.metadata("worker"),
                timeout=10,
            )
        )
        await parked(setup.server, "decision", "handed")
        await stub.StartWorkflow(
            s.StartWorkflowRequest(
                namespace="default",
                workflow_id="handed-over",
                workflow_type=c.WorkflowType(name="wt"),
                task_list="handed",
            ),
            metadata=setup.metadata("starter"),
        )
        task = await poll
        assert task.task_token
        history = await stub.GetWorkflowHistory(
            s.GetWorkflowHistoryRequest(
                namespace="default", execution=c.WorkflowExecution(workflow_id="handed-over")
            ),
            metadata=setup.metadata("reader"),
        )
    by_type = {e.type: e.principal for e in history.events}
    key_of = {who: f"key:{setup.keys[who].split('.')[1]}" for who in ("worker", "starter")}
    assert by_type["WorkflowStarted"] == key_of["starter"]
    assert by_type["DeciderStarted"] == key_of["worker"]


@pytest.mark.long_poll(10)
async def test_a_waiting_poll_of_a_revoked_key_is_handed_nothing(setup: Setup) -> None:
    """Revoked while its poll waits: the task is not started by it, and waits for
    another worker."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        admin = ag.AdminServiceStub(channel)
        request = s.PollForDecisionTaskRequest(namespace="default", task_list="revoked-list")
        poll = asyncio.ensure_future(
            stub.PollForDecisionTask(request, metadata=setup.metadata("worker"), timeout=10)
        )
        await parked(setup.server, "decision", "revoked-list")
        worker_id = setup.keys["worker"].split(".")[1]
        await admin.RevokeCredential(
            a.RevokeCredentialRequest(id=worker_id), metadata=setup.metadata("admin")
        )
        await stub.StartWorkflow(
            s.StartWorkflowRequest(
                namespace="default",
                workflow_id="for-the-revoked",
                workflow_type=c.WorkflowType(name="wt"),
                task_list="revoked-list",
            ),
            metadata=setup.metadata("starter"),
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await poll
        assert info.value.code() == UNAUTH, info.value.details()
        other = await stub.PollForDecisionTask(request, metadata=setup.metadata("admin"))
        assert other.task_token
        started = [e for e in other.events if e.type == "DeciderStarted"]
        assert [e.principal for e in started] == [f"key:{setup.keys['admin'].split('.')[1]}"]


async def test_signal_with_start_on_an_open_run_of_another_type_is_refused(setup: Setup) -> None:
    """A starter narrowed to type "x" names type "x", but the open run is a "wt"."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stub = sg.WorkflowServiceStub(channel)
        before = await setup.history_length()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.SignalWithStartWorkflow(
                s.SignalWithStartWorkflowRequest(
                    start=s.StartWorkflowRequest(
                        namespace="default",
                        workflow_id=WF,
                        workflow_type=c.WorkflowType(name="x"),
                        task_list="tl-a",
                    ),
                    signal_name="go",
                ),
                metadata=setup.metadata("starter-other-type"),
            )
        assert info.value.code() == DENIED, info.value.details()
        assert await setup.history_length() == before

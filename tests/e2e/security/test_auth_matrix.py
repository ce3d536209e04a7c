"""Every RPC of WorkflowService and AdminService, by every caller, → the exact
status, on SQLite and on PostgreSQL, through a real gRPC server started with
authentication required. Where a call is refused, the run it aimed at is
unchanged. The focused authentication tests are in test_auth_principals.py; the
callers, their keys, the requests and the fixtures in auth_matrix_setup.py.

The expected table below is written out from the issue's roles (not derived
from `orchestrator.auth.grants`), so a change to the rules has to change it too.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc

from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from sdk.lanes import Lanes
from tests.e2e.security import auth_matrix_setup
from tests.e2e.security.auth_matrix_setup import (
    BAD_CREDENTIALS,
    CALLERS,
    DENIED,
    NOT_FOUND,
    OK,
    UNAUTH,
    Setup,
    requests,
)

# The fixtures the tests below take, bound here so that pytest finds them in this
# module (a conftest would hand them to every test of the folder).
server_config = auth_matrix_setup.server_config
setup = auth_matrix_setup.setup

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


def test_every_rpc_is_in_the_table() -> None:
    services = [
        s.DESCRIPTOR.services_by_name["WorkflowService"],
        a.DESCRIPTOR.services_by_name["AdminService"],
    ]
    assert {m.name for svc in services for m in svc.methods} == set(ALLOWED)


async def test_every_rpc_by_every_caller(setup: Setup) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        stubs = (sg.WorkflowServiceStub(channel), ag.AdminServiceStub(channel))

        def unary(rpc: str, who: str) -> Call:
            stub = stubs[1] if rpc in ADMIN_RPCS else stubs[0]
            return functools.partial(getattr(stub, rpc), metadata=setup.metadata(who))

        wrong = await _matrix(setup, ALLOWED, unary)
    assert not wrong, "\n".join(wrong)


async def test_every_workflow_rpc_by_every_caller_on_a_lane(setup: Setup) -> None:
    """A lane (`LaneService.Exchange`, opened with the caller's credentials) is
    no second door: every WorkflowService call on it gets the unary status."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{setup.server.port}") as channel:
        lanes: dict[str, Lanes] = {}

        def on_lane(rpc: str, who: str) -> Call:
            lane = lanes.setdefault(who, Lanes(channel, setup.metadata(who)))
            return lambda request, timeout: lane.call(rpc, request, timeout)

        rpcs = [rpc for rpc in ALLOWED if rpc not in ADMIN_RPCS]
        wrong = await _matrix(setup, rpcs, on_lane)
        assert all(lane.supported for lane in lanes.values())
    assert not wrong, "\n".join(wrong)


Call = Callable[..., Awaitable[Any]]


async def _matrix(
    setup: Setup, rpcs: Iterable[str], call_of: Callable[[str, str], Call]
) -> list[str]:
    """Each of `rpcs` by every caller, as `call_of(rpc, who)` sends it: what
    differs from the table."""
    wrong: list[str] = []
    build = requests(setup)
    for rpc in rpcs:
        for who in (*CALLERS, "none", "garbage", "unknown-key", "wrong-secret"):
            want = expected(rpc, who)
            before = await setup.history_length()
            try:
                await call_of(rpc, who)(build[rpc](), timeout=10)
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
    return wrong

"""`AsyncClient`: the SDK's one real client, on `grpc.aio`.

Everything else (the sync `Client`, the workers, the CLI) goes through it. Each
call becomes one RPC; `UNAVAILABLE` and `ABORTED` are retried with backoff, and
a refusal for the caller's request rate after the wait the server asks for (see
`retry.py`); any other failure raises the typed error of `errors.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import timedelta
from typing import Any, Literal

import grpc
import structlog
from google.protobuf.message import Message

from sdk.addresses import is_loopback
from sdk.api.weft.v1 import admin_pb2 as a
from sdk.api.weft.v1 import admin_pb2_grpc as ag
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from sdk.cluster import ClusterCalls
from sdk.converter import DEFAULT_CONVERTER, PayloadConverter
from sdk.credentials import CredentialCalls, check_api_key
from sdk.diagnostics import DiagnosticCalls
from sdk.durations import duration
from sdk.errors import (
    DeadlineExceededError,
    WeftError,
    WorkflowCanceledError,
    WorkflowFailedError,
    WorkflowOutcomeError,
    WorkflowTerminatedError,
    WorkflowTimedOutError,
    from_rpc_error,
    retry_after,
)
from sdk.events import CLOSE_TYPES, Event, event_from_proto
from sdk.in_process import InProcess
from sdk.lanes import LANE_METHODS, PLACEMENT_WAIT, Lanes, LanesUnsupported, Placement
from sdk.lock_calls import LockCalls
from sdk.reachability import Reachability
from sdk.retry import DEFAULT_RETRY, RetryPolicy
from sdk.schedules import ScheduleCalls
from sdk.tls import TlsConfig, diagnose, looks_like_tls, open_channel, tls_config
from sdk.visibility import VisibilityCalls
from sdk.workflows import (
    STATUS_FILTERS,
    NamespaceInfo,
    WorkflowDescription,
    WorkflowInfo,
    WorkflowRun,
)

log = structlog.get_logger("weft.client")

DEFAULT_ADDRESS = "127.0.0.1:7400"
DEFAULT_NAMESPACE = "default"
# The server answers an idle long poll after 60 s; past this the connection is
# presumed dead and the call is made again.
POLL_TIMEOUT = timedelta(seconds=90)
# What the server may send (and receive): a client never refuses an answer the
# server was allowed to give. The server's own setting is the same number.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

# UNAVAILABLE: the server or its database is away; ABORTED: the request lost a
# race with a concurrent update and nothing was written.
_RETRIED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED})
# Methods of AdminService; every other method is WorkflowService's.
_ADMIN_METHODS = frozenset(a.DESCRIPTOR.services_by_name["AdminService"].methods_by_name)
_OUTCOMES: dict[str, type[WorkflowOutcomeError]] = {
    "WorkflowFailed": WorkflowFailedError,
    "WorkflowTimedOut": WorkflowTimedOutError,
    "WorkflowCanceled": WorkflowCanceledError,
    "WorkflowTerminated": WorkflowTerminatedError,
}


def default_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class AsyncClient(
    CredentialCalls, ClusterCalls, DiagnosticCalls, LockCalls, ScheduleCalls, VisibilityCalls
):
    """A connection to a Weft server, for one namespace.

    Create it anywhere; the gRPC channel opens on first use, inside the running
    event loop, and serves that loop only. Close it with `await client.close()` or
    `async with`.

    `tls=TlsConfig(ca=..., cert=..., key=..., server_name=...)` connects over TLS
    (with `cert` and `key`, mutual TLS); `tls=True` over TLS trusting the system's
    root certificates; the default is plaintext. A failed handshake raises
    `TlsError` (an `UnavailableError`) at once, without retrying.

    `api_key` is sent with every call (`authorization: Bearer <key>`) to a
    server that requires credentials (`weft server --auth`). Refused
    credentials raise `UnauthenticatedError`; a call outside the key's grant
    raises `PermissionDeniedError`. Neither is retried.
    """

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        identity: str | None = None,
        converter: PayloadConverter = DEFAULT_CONVERTER,
        retry: RetryPolicy = DEFAULT_RETRY,
        tls: TlsConfig | bool | None = None,
        api_key: str | None = None,
        in_process: InProcess | None = None,
    ) -> None:
        self.address = address
        if api_key:
            check_api_key(api_key)
        self.api_key = api_key or None
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.converter = converter
        self.retry = retry
        self.tls = tls_config(tls)
        self._channel: grpc.aio.Channel | None = None
        self._stub: sg.WorkflowServiceStub | None = None
        self._admin: ag.AdminServiceStub | None = None
        self._lanes: Lanes | None = None
        self._own_connection = False
        self.in_process = in_process
        """Set (`weft server --embed`): calls go to the node's services in this
        process, without gRPC, not to `address`."""
        self._reach = Reachability(address)

    def fork(self) -> AsyncClient:
        """A client like this one on a connection of its own (not shared with
        other channels to the address; in process, the same services): a
        worker's polls go through a few (`sdk.poll_connections`)."""
        twin = AsyncClient(
            self.address,
            namespace=self.namespace,
            identity=self.identity,
            converter=self.converter,
            retry=self.retry,
            tls=self.tls,
            api_key=self.api_key,
            in_process=self.in_process,
        )
        twin._own_connection = True
        twin._reach = self._reach  # (one outage said once, not once per connection)
        return twin

    async def placement(self) -> Placement | None:
        """Where this connection landed (`Lanes.placement`); None: not said."""
        self._service()  # (opens the channel and its lanes)
        return await self._lanes.placement(PLACEMENT_WAIT) if self._lanes is not None else None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            if self._lanes is not None:
                self._lanes.close()
            self._stub, self._admin, self._lanes = None, None, None
            await channel.close()

    # -- starting and steering workflows ----------------------------------------------

    async def start_workflow(
        self,
        workflow_type: str,
        input: Any = None,
        *,
        workflow_id: str | None = None,
        version: str = "",
        task_list: str = "",
        execution_timeout: timedelta | None = None,
        decider_timeout: timedelta | None = None,
        request_id: str | None = None,
    ) -> WorkflowRun:
        """Start a run. Raises `AlreadyExistsError` while another run of the id is open.

        `workflow_id` defaults to a fresh `TYPE-UUID`. Retrying with the same
        `request_id` returns the run the first attempt started.
        """
        req = self._start_request(
            workflow_type,
            input,
            workflow_id=workflow_id,
            version=version,
            task_list=task_list,
            execution_timeout=execution_timeout,
            decider_timeout=decider_timeout,
            request_id=request_id,
        )
        resp = await self.rpc("StartWorkflow", req)
        return WorkflowRun(req.workflow_id, resp.run_id)

    async def signal_with_start(
        self,
        workflow_type: str,
        signal_name: str,
        signal_input: Any = None,
        *,
        workflow_id: str,
        input: Any = None,
        version: str = "",
        task_list: str = "",
        execution_timeout: timedelta | None = None,
        decider_timeout: timedelta | None = None,
        request_id: str | None = None,
    ) -> WorkflowRun:
        """Signal the open run of `workflow_id`, starting one first if none is open."""
        start = self._start_request(
            workflow_type,
            input,
            workflow_id=workflow_id,
            version=version,
            task_list=task_list,
            execution_timeout=execution_timeout,
            decider_timeout=decider_timeout,
            request_id=request_id,
        )
        req = s.SignalWithStartWorkflowRequest(
            start=start, signal_name=signal_name, signal_input=self.converter.encode(signal_input)
        )
        resp = await self.rpc("SignalWithStartWorkflow", req)
        return WorkflowRun(workflow_id, resp.run_id, started=resp.started)

    async def signal(
        self,
        workflow_id: str,
        signal_name: str,
        input: Any = None,
        *,
        run_id: str = "",
        request_id: str | None = None,
    ) -> None:
        """Append a `Signal` to the open run. The same `request_id` twice signals once."""
        await self.rpc(
            "SignalWorkflow",
            s.SignalWorkflowRequest(
                namespace=self.namespace,
                execution=c.WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                signal_name=signal_name,
                input=self.converter.encode(input),
                identity=self.identity,
                request_id=request_id or str(uuid.uuid4()),
            ),
        )

    async def cancel(
        self, workflow_id: str, *, run_id: str = "", reason: str = "", request_id: str | None = None
    ) -> None:
        """Ask the run's decider to cancel it (`WorkflowCancelRequested`)."""
        await self.rpc(
            "RequestCancelWorkflow",
            s.RequestCancelWorkflowRequest(
                namespace=self.namespace,
                execution=c.WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                reason=reason,
                identity=self.identity,
                request_id=request_id or str(uuid.uuid4()),
            ),
        )

    async def terminate(
        self, workflow_id: str, *, run_id: str = "", reason: str = "", details: Any = None
    ) -> None:
        """Close the run at once (`WorkflowTerminated`); its decider is not asked."""
        req = s.TerminateWorkflowRequest(
            namespace=self.namespace,
            execution=c.WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            reason=reason,
            identity=self.identity,
        )
        if details is not None:
            req.details.CopyFrom(self.converter.encode(details))
        await self.rpc("TerminateWorkflow", req)

    async def register_workflow_type(
        self,
        name: str,
        *,
        version: str = "",
        default_task_list: str = "",
        default_execution_timeout: timedelta | None = None,
        default_decider_timeout: timedelta | None = None,
        description: str = "",
        definition: str = "",
    ) -> None:
        """Record a workflow type's defaults; registering again changes the ones given
        and keeps the others.

        `definition` is a step workflow's YAML text: every run started afterwards
        carries a copy in its `WorkflowStarted` (`attributes["definition"]`), so
        registering a new one never changes a run under way. Over 256 KiB it is
        refused with `InvalidArgumentError`.
        """
        await self.rpc(
            "RegisterWorkflowType",
            s.RegisterWorkflowTypeRequest(
                namespace=self.namespace,
                workflow_type=c.WorkflowType(name=name, version=version),
                default_task_list=default_task_list,
                default_execution_timeout=duration(default_execution_timeout),
                default_decider_timeout=duration(default_decider_timeout),
                description=description,
                definition=definition,
            ),
        )

    # -- reading workflows --------------------------------------------------------------

    async def describe(self, workflow_id: str, *, run_id: str = "") -> WorkflowDescription:
        resp = await self.rpc(
            "DescribeWorkflow",
            s.DescribeWorkflowRequest(
                namespace=self.namespace,
                execution=c.WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            ),
        )
        return WorkflowDescription.from_proto(resp, self.converter)

    async def register_namespace(
        self, name: str, *, retention: str = "", description: str = ""
    ) -> None:
        """Register a namespace, with the default retention policy of its runs
        (STEPS.md "Retention"; "3" unless given). Registering again changes what it gives."""
        await self.rpc(
            "RegisterNamespace",
            a.RegisterNamespaceRequest(name=name, retention=retention, description=description),
        )

    async def describe_namespace(self, name: str) -> NamespaceInfo:
        resp = await self.rpc("DescribeNamespace", a.DescribeNamespaceRequest(name=name))
        return NamespaceInfo(resp.name, resp.retention, resp.description, resp.registered)

    async def request_replay(
        self,
        workflow_id: str,
        mode: Literal["resuming", "from", "from_start", "last"],
        *,
        step: str = "",
        force: bool = False,
        point: Any = None,
        run_id: str = "",
        reason: str = "",
    ) -> tuple[str, bool]:
        """Ask for a step-workflow replay with a point already resolved from the
        history (`workers.steps.replay.resolve` does that; `weft replay` does both).
        Returns (the run that replays, whether it is a new run)."""
        resp = await self.rpc(
            "ReplayWorkflow",
            a.ReplayWorkflowRequest(
                namespace=self.namespace,
                execution=c.WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                mode=mode,
                step=step,
                force=force,
                identity=self.identity,
                reason=reason,
                point=self.converter.encode(point),
            ),
        )
        return resp.run_id, resp.new_run

    async def history(self, workflow_id: str, *, run_id: str = "") -> list[Event]:
        """The run's whole history as it stands (the current run unless `run_id`)."""
        return [event async for event in self.iter_history(workflow_id, run_id=run_id)]

    async def iter_history(
        self, workflow_id: str, *, run_id: str = "", follow: bool = False, page_size: int = 0
    ) -> AsyncGenerator[Event]:
        """The run's events page by page; with `follow`, keep waiting for new ones
        until the run closes."""
        async for _, event in self._history_pages(workflow_id, run_id, follow, page_size):
            yield event_from_proto(event, self.converter)

    async def list(
        self,
        *,
        status: Literal["open", "closed"] | None = None,
        workflow_type: str = "",
        workflow_id: str = "",
        limit: int = 100,
    ) -> list[WorkflowInfo]:
        """Runs, newest start first."""
        if status not in STATUS_FILTERS:
            raise ValueError(f"status must be 'open', 'closed' or None, not {status!r}")
        out: list[WorkflowInfo] = []
        token = b""
        while len(out) < limit:
            resp = await self.rpc(
                "ListWorkflows",
                s.ListWorkflowsRequest(
                    namespace=self.namespace,
                    status_filter=STATUS_FILTERS[status],
                    workflow_type=workflow_type,
                    workflow_id=workflow_id,
                    page_size=min(limit - len(out), 1000),
                    next_page_token=token,
                ),
            )
            out.extend(WorkflowInfo.from_proto(info) for info in resp.executions)
            token = resp.next_page_token
            if not token:
                break
        return out[:limit]

    async def result(
        self, workflow_id: str, *, run_id: str = "", timeout: timedelta | None = None
    ) -> Any:
        """Wait for the run to close and return its result, following continue-as-new.

        Raises `WorkflowFailedError`, `WorkflowTimedOutError`,
        `WorkflowCanceledError` or `WorkflowTerminatedError` with the reason and
        details from the history, and `DeadlineExceededError` if `timeout` passes
        first.
        """
        try:
            return await asyncio.wait_for(
                self._result(workflow_id, run_id),
                timeout.total_seconds() if timeout is not None else None,
            )
        except TimeoutError:
            why = f"workflow {workflow_id} did not close within {timeout}"
            raise DeadlineExceededError(why) from None

    async def _result(self, workflow_id: str, run_id: str) -> Any:
        while True:
            close: Event | None = None
            async for current, msg in self._history_pages(workflow_id, run_id, True, 0):
                run_id = current
                if msg.type in CLOSE_TYPES:
                    close = event_from_proto(msg, self.converter)
            if close is None:
                raise WeftError(f"workflow {workflow_id}: its history ended without a close event")
            if close.type == "WorkflowSuccess":
                return close.get("result")
            if close.type == "WorkflowContinuedAsNew":
                run_id = close.get("new_run_id", "")
                continue
            reason = close.get("reason") or close.get("timeout_type", "")
            raise _OUTCOMES[close.type](workflow_id, run_id, reason, close.get("details"))

    # -- the wire -------------------------------------------------------------------------

    async def _history_pages(
        self, workflow_id: str, run_id: str, follow: bool, page_size: int
    ) -> AsyncIterator[tuple[str, Any]]:
        """(run id, raw event) for each event; the run id is the one the server resolved."""
        token = b""
        while True:
            resp = await self.rpc(
                "GetWorkflowHistory",
                s.GetWorkflowHistoryRequest(
                    namespace=self.namespace,
                    execution=c.WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                    page_size=page_size,
                    next_page_token=token,
                    wait_new_event=follow,
                ),
                timeout=POLL_TIMEOUT if follow else None,
            )
            for event in resp.events:
                yield resp.run_id, event
            if not resp.next_page_token:
                return
            token = resp.next_page_token

    def _start_request(
        self,
        workflow_type: str,
        input: Any,
        *,
        workflow_id: str | None,
        version: str,
        task_list: str,
        execution_timeout: timedelta | None,
        decider_timeout: timedelta | None,
        request_id: str | None,
    ) -> s.StartWorkflowRequest:
        req = s.StartWorkflowRequest(
            namespace=self.namespace,
            workflow_id=workflow_id or f"{workflow_type}-{uuid.uuid4()}",
            workflow_type=c.WorkflowType(name=workflow_type, version=version),
            task_list=task_list,
            input=self.converter.encode(input),
            execution_timeout=duration(execution_timeout),
            decider_timeout=duration(decider_timeout),
            identity=self.identity,
            request_id=request_id or str(uuid.uuid4()),
        )
        return req

    async def rpc(
        self,
        method: str,
        request: Message,
        *,
        timeout: timedelta | None = None,
        retried: bool = True,
    ) -> Any:
        """Call `WorkflowService.<method>` (or `AdminService.<method>`), retrying
        `UNAVAILABLE` and `ABORTED` by the retry policy, and a refusal for the
        request rate after the wait the server asks for, within the policy's
        time (`retried=False`: once, for a call whose caller must know that it
        was not sent twice, or that must not wait).

        The low-level door the workers and the CLI use; prefer the methods above.
        """
        delays = self.retry.delays()
        seconds = timeout.total_seconds() if timeout is not None else None
        while True:
            try:
                response = await self._call(method, request, seconds)
                if self._reach.away_since is not None:
                    self._reach.back()
                return response
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if not retried:
                    raise from_rpc_error(exc) from exc
                asked = retry_after(exc) if code == grpc.StatusCode.RESOURCE_EXHAUSTED else None
                if asked is not None:  # over the request rate: refused before doing anything
                    wait = delays.pushback(asked.total_seconds())
                    if wait is None:
                        raise from_rpc_error(exc) from exc
                    log.debug("rpc.rate_limited", method=method, wait=round(wait, 3))
                    await asyncio.sleep(wait)
                    continue
                if code == grpc.StatusCode.DEADLINE_EXCEEDED and timeout == POLL_TIMEOUT:
                    continue  # a long poll outlived a silent connection: ask again
                if code == grpc.StatusCode.UNAVAILABLE and looks_like_tls(exc.details() or ""):
                    # A refused handshake is a setting to fix, not a server to wait for.
                    refused = await asyncio.to_thread(diagnose, self.address, self.tls)
                    if refused is not None:
                        raise refused from exc
                wait = delays.next() if code in _RETRIED else None
                if wait is None:
                    raise from_rpc_error(exc) from exc
                log.debug("rpc.retry", method=method, wait=round(wait, 3), error=exc.details())
                if code == grpc.StatusCode.UNAVAILABLE:
                    self._reach.away(exc.details() or "")
                await asyncio.sleep(wait)

    async def _call(self, method: str, request: Message, timeout: float | None) -> Any:
        """One call of `method`: a worker's task calls on lanes (`sdk.lanes`)."""
        if method in _ADMIN_METHODS:
            stub = self._admin_service()
        else:
            stub, lanes = self._service(), self._lanes
            if lanes is not None and lanes.supported and method in LANE_METHODS:
                with contextlib.suppress(LanesUnsupported):
                    return await lanes.call(method, request, timeout)
        return await getattr(stub, method)(request, timeout=timeout, metadata=self._metadata)

    def _service(self) -> Any:
        if self.in_process is not None:
            return self.in_process.workflow
        if self._stub is None:
            self._channel = open_channel(
                self.address, self.tls, MAX_MESSAGE_BYTES, own_connection=self._own_connection
            )
            self._stub = sg.WorkflowServiceStub(self._channel)
            self._admin = ag.AdminServiceStub(self._channel)
            # Direct lanes only to a node reached on loopback without TLS (a node
            # offers them only then), and never through a unix socket.
            direct = self.tls is None and is_loopback(self.address)
            direct = direct and not self.address.startswith(("unix:", "unix-abstract:"))
            self._lanes = Lanes(self._channel, self._metadata, MAX_MESSAGE_BYTES if direct else 0)
        return self._stub

    def _admin_service(self) -> Any:
        if self.in_process is not None:
            return self.in_process.admin
        self._service()  # (opens the channel and its stubs)
        return self._admin

"""Calls from this process to the node's own services without gRPC: the
transport of the workers `weft server --embed MODULE` runs beside the node.

A worker's client (`AsyncClient(in_process=…)`) calls these the way it calls a
gRPC stub: `await stub.Method(request, timeout=…, metadata=…)`, and a refusal
arrives as the `grpc.aio.AioRpcError` a remote call would raise, so that the
SDK's retries and errors work unchanged. Each call goes through the same
handler as a remote one (`errors.grpc_errors`: validation, the guard, metrics,
the audit line); what it saves is the HTTP/2 framing, the gRPC core and the
hops between processes, which cost a worker and the server more than the work
itself (bench/README.md, "One process").

Requests and responses cross as copies (serialized and parsed, as on the
wire): a handler may keep a request's parts, and a client may reuse a request
it sent, so neither may share the other's objects.

One difference from gRPC remains: the handler runs in the caller's task, so a
handler that sees a write through when its deadline passes (the store does)
holds its caller until the write is done, and the caller then gets its answer,
where a gRPC caller would get DEADLINE_EXCEEDED on time and never learn it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message

from orchestrator.auth.gate import Caller
from sdk.api.weft.v1 import admin_pb2, service_pb2
from sdk.errors import rpc_error

from .handlers import request_parser

_SERVICES = service_pb2.DESCRIPTOR.services_by_name
_ADMIN = admin_pb2.DESCRIPTOR.services_by_name["AdminService"]

PEER = "in-process"
"""What a handler's `context.peer()` says of an in-process caller (the poller
sightings and the audit lines show it)."""

Handler = Callable[[Any, Any], Awaitable[Message]]


class Aborted(grpc.aio.AbortError):
    """What `abort` raises in a handler called without its own gRPC call (in
    process, or on a lane): `grpc_errors` lets AbortError through."""

    def __init__(self, code: grpc.StatusCode, details: str, trailers: Sequence[Any]) -> None:
        super().__init__(details)
        self.code = code
        self.details = details
        self.trailers = tuple(trailers)


class CallContext:
    """The parts of `grpc.aio.ServicerContext` Weft's handlers use, for a call
    that has no gRPC call of its own: in process (no TLS, the peer `PEER`), or
    on a lane (the stream's metadata, certificate and peer)."""

    def __init__(
        self,
        metadata: Sequence[tuple[str, str]] | None,
        auth: Mapping[str, Iterable[bytes]] | None = None,
        peer: str = PEER,
        caller: Caller | None = None,
    ) -> None:
        self._metadata = tuple(metadata or ())
        self._auth = auth or {}
        self._peer = peer
        self.caller = caller
        """Who an in-process call is, under `--auth` (`InProcessServices.admit_as`):
        the guard takes it as it is. Never set for a call from outside the process."""

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Sequence[Any] = ()
    ) -> NoReturn:
        raise Aborted(code, details, trailing_metadata)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def auth_context(self) -> Mapping[str, Iterable[bytes]]:
        return self._auth  # in process: no TLS in between, no certificate

    def peer(self) -> str:
        return self._peer


class _Method:
    """One unary method, called as a stub's method is."""

    def __init__(
        self, handler: Handler, method: MethodDescriptor, services: InProcessServices | None
    ) -> None:
        self._handler = handler
        self._services = services
        self._parse = request_parser(method)
        self._response = message_factory.GetMessageClass(method.output_type)

    async def __call__(
        self,
        request: Message,
        *,
        timeout: float | None = None,
        metadata: Sequence[tuple[str, str]] | None = None,
    ) -> Message:
        # The handler runs in the caller's task, as the worker's own await: no
        # task made per call. A handler may finish its write when cancelled (a
        # write already sent is seen through): the caller's cancellation must
        # not end there, as it would not over gRPC, where the handler's task is
        # the server's own.
        caller = asyncio.current_task()
        cancelling = caller.cancelling() if caller is not None else 0
        failure: Exception | None = None
        try:
            async with asyncio.timeout(timeout):
                who = self._services.caller if self._services is not None else None
                context = CallContext(metadata, caller=who)
                response = await self._handler(self._parse(request.SerializeToString()), context)
        except Aborted as exc:
            failure = rpc_error(exc.code, exc.details, exc.trailers)
        except TimeoutError:
            failure = rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        if caller is not None and caller.cancelling() > cancelling:
            # What the handler answered is dropped, as a cancelled gRPC call drops it.
            raise asyncio.CancelledError
        if failure is not None:
            raise failure
        return self._response.FromString(response.SerializeToString())


class InProcessStub:
    """A service's methods as attributes, like a generated stub's."""

    def __init__(
        self, servicer: Any, service: ServiceDescriptor, services: InProcessServices | None = None
    ) -> None:
        self._methods = {
            m.name: _Method(getattr(servicer, m.name), m, services) for m in service.methods
        }

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):  # (not a method: no lookup of `_methods` itself)
            raise AttributeError(name)
        try:
            return self._methods[name]
        except KeyError:
            raise AttributeError(name) from None


class InProcessServices:
    """A node's two services for a client in its process (`sdk.client.InProcess`).
    Made before the node starts (so that workers are built, and their modules
    checked, before anything opens); usable once it has."""

    def __init__(self, servicers: Callable[[], tuple[Any, Any]]) -> None:
        self._servicers = servicers
        self.caller: Caller | None = None

    def admit_as(self, caller: Caller) -> None:
        """Under `--auth`: every call made through these services is `caller`'s
        (the embedded workers', `auth.gate.embedded_workers`), checked against
        its grants as a remote caller's would be. Without it, such a node
        refuses them as calls without credentials (UNAUTHENTICATED)."""
        self.caller = caller

    @functools.cached_property
    def workflow(self) -> InProcessStub:
        return InProcessStub(self._servicers()[0], _SERVICES["WorkflowService"], self)

    @functools.cached_property
    def admin(self) -> InProcessStub:
        return InProcessStub(self._servicers()[1], _ADMIN, self)

"""`LaneService.Exchange`: a worker's calls of WorkflowService over one stream.

A unary call costs the server a whole gRPC call (its set-up, metadata, status,
and grpc.aio's accept loop and task); a message on an open stream costs about a
third of that, here and in the worker (bench/README.md, "Lanes"). The SDK
keeps a pool of streams, one per call a client has in flight, and sends a
worker's polls, answers and heartbeats on them (`sdk/lanes.py`).

Each `LaneCall` is answered by one `LaneAnswer`, in order: the call goes through
the same handler as its unary twin (`errors.grpc_errors`: validation, the guard
on the stream's credentials, metrics, the audit line), and a refusal comes back
as the code, text and trailers the unary call would have ended with. A call runs
in the stream's own task, so a worker that cancels the stream (a stop, a
deadline of its own) cancels the call in flight, as it would a unary call.

A stream is refused (UNAUTHENTICATED) to a caller whose credentials do not
hold, and (RESOURCE_EXHAUSTED) to a client host that holds as many as it may
hold polls, so that no one holds streams open without end; each call on one is
then let in or refused as its unary twin would be.

At a drain, a stream waiting for its next call is ended, and one answering a
call ends after its answer: nothing holds the server's grace.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager
from typing import Any

import grpc
import structlog
from google.protobuf.descriptor import ServiceDescriptor

from orchestrator.dispatch.polls import ClientShares, client_of
from orchestrator.engine.errors import EngineError, ResourceExhausted
from orchestrator.metrics import Metrics
from sdk.api.weft.v1 import lanes_pb2 as pb
from sdk.errors import LANE_REFUSED_METADATA
from sdk.lanes import DIRECT_LANE_METADATA, NODE_METADATA, PORT_PROCESSES_METADATA

from .guard import Guard
from .handlers import MalformedRequest, lenient, request_parser
from .in_process import Aborted, CallContext, Handler

log = structlog.get_logger("weft.api")
SERVICE = pb.DESCRIPTOR.services_by_name["LaneService"]

Parse = Any  # (bytes -> a request message, or MalformedRequest)


class Lanes:
    """The lanes of one node, over its `service` (the WorkflowService servicer)."""

    def __init__(self, service: Any, methods: ServiceDescriptor) -> None:
        self._methods: dict[str, tuple[Handler, Parse]] = {
            m.name: (getattr(service, m.name), request_parser(m)) for m in methods.methods
        }
        self._guard: Guard = service.guard
        self._metrics: Metrics = service.metrics
        self._per_client = ClientShares(service.polls.max_per_client, "lanes open")
        self._waiting: set[asyncio.Task[Any]] = set()
        self._closing = False
        self.placement: tuple[tuple[str, str], ...] = ()
        """The metadata each stream opens with: `place` and `offer_direct` set it."""
        self.node_name = ""

    def place(self, node: str, processes: int) -> None:
        """This node's name, and how many processes serve its port (`--workers N`)."""
        self.node_name = node
        self.placement = (
            *(item for item in self.placement if item[0] == DIRECT_LANE_METADATA),
            (NODE_METADATA, node),
            (PORT_PROCESSES_METADATA, str(processes)),
        )

    def offer_direct(self, address: str, key: str) -> None:
        """Name this node's direct lanes (`orchestrator.api.direct_lanes`) in
        each stream's opening: where, and the key a client sends first."""
        self.placement = (
            *(item for item in self.placement if item[0] != DIRECT_LANE_METADATA),
            (DIRECT_LANE_METADATA, f"{address} {key}"),
        )

    def count(self, rpc: str, code: str) -> None:
        """Count a call of `rpc` that ended with `code` (one refused before any handler)."""
        self._metrics.rpc(rpc, code).observe(0)

    def share(self, client: str) -> AbstractContextManager[None]:
        """One of `client`'s lanes held while the block runs (RESOURCE_EXHAUSTED
        if it holds as many as it may): a direct lane counts as a gRPC one."""
        return self._per_client.hold(client)

    @property
    def open(self) -> int:
        """Streams open now."""
        return self._per_client.total()

    async def Exchange(
        self,
        calls: AsyncIterator[Any],
        context: grpc.aio.ServicerContext[Any, pb.LaneAnswer],
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        caller = CallContext(
            tuple(context.invocation_metadata() or ()),  # type: ignore[arg-type]
            context.auth_context(),
            context.peer(),
        )
        client = client_of(context.peer())
        await self._let_in(context, client)
        with self._per_client.hold(client):  # (nothing awaited since the check)
            # Which process of the port took the stream, and how many there are:
            # a worker spreads its poll connections over them (`sdk.lanes`).
            await context.send_initial_metadata(self.placement)
            await self._serve(context, caller, task)

    async def _serve(
        self,
        context: grpc.aio.ServicerContext[Any, pb.LaneAnswer],
        caller: CallContext,
        task: asyncio.Task[Any],
    ) -> None:
        while not self._drained():  # (a stream opened during the drain ends at once)
            self._waiting.add(task)
            try:
                call = await context.read()
            except asyncio.CancelledError:
                if self._drained():
                    return  # ended by the drain while waiting: no call was taken
                raise
            finally:
                self._waiting.discard(task)
            if call is grpc.aio.EOF:
                return
            answer = await self.answer(call, caller)
            answer.last = self._drained()
            await context.write(answer)

    async def _let_in(
        self, context: grpc.aio.ServicerContext[Any, pb.LaneAnswer], client: str
    ) -> None:
        """Refuse the stream, as a unary call would be refused, to a caller
        without good credentials, or to a client host that holds as many
        streams as it may hold polls (`--max-polls-per-client`; a lane carries
        one poll at a time): so that no one holds streams open without end."""
        try:
            await self._guard.authenticate(context)
            self._per_client.check(client)
        except EngineError as exc:
            log.info("rpc.refused", rpc="Exchange", code=exc.code_name, reason=str(exc))
            self._metrics.rpc("Exchange", exc.code_name).observe(0)
            # A client over its share sends its calls unary instead (the SDK
            # does so on this trailer): a lane refused is not a call refused.
            trailers = ((LANE_REFUSED_METADATA, "1"),) if isinstance(exc, ResourceExhausted) else ()
            await context.abort(getattr(grpc.StatusCode, exc.code_name), str(exc), trailers)
        except Exception:
            ref = uuid.uuid4().hex[:12]
            log.exception("rpc.crashed", rpc="Exchange", ref=ref)
            self._metrics.rpc("Exchange", "INTERNAL").observe(0)
            await context.abort(
                grpc.StatusCode.INTERNAL, f"internal error (server log reference {ref})"
            )

    def _drained(self) -> bool:
        return self._closing

    def close(self) -> None:
        """The node drains: streams waiting for a call end now, the others
        after the answer they owe."""
        self._closing = True
        for task in list(self._waiting):
            task.cancel()

    async def answer(
        self, call: pb.LaneCall | MalformedRequest, caller: CallContext
    ) -> pb.LaneAnswer:
        """The answer to one call on a lane (a refusal in it, as the unary
        call's status would say)."""
        if isinstance(call, MalformedRequest):
            log.info("rpc.refused", rpc="Exchange", code="INVALID_ARGUMENT", reason=call.error)
            self._metrics.rpc("Exchange", "INVALID_ARGUMENT").observe(0)
            return pb.LaneAnswer(
                code=grpc.StatusCode.INVALID_ARGUMENT.value[0],
                details=f"the message is not a valid {call.message}: {call.error}",
            )
        found = self._methods.get(call.method)
        if found is None:
            log.info("rpc.refused", rpc="Exchange", code="UNIMPLEMENTED", method=call.method[:100])
            self._metrics.rpc("Exchange", "UNIMPLEMENTED").observe(0)
            return pb.LaneAnswer(
                code=grpc.StatusCode.UNIMPLEMENTED.value[0],
                details=f"no method {call.method[:100]!r} in WorkflowService",
            )
        handler, parse = found
        try:
            response = await handler(parse(call.request), caller)
        except Aborted as exc:
            return pb.LaneAnswer(
                code=exc.code.value[0],
                details=exc.details,
                trailers=[pb.LaneTrailer(key=k, value=v) for k, v in exc.trailers],
            )
        return pb.LaneAnswer(response=response.SerializeToString())


def register(server: grpc.aio.Server, lanes: Lanes) -> None:
    handlers = {
        "Exchange": grpc.stream_stream_rpc_method_handler(
            lanes.Exchange,
            request_deserializer=lenient(pb.LaneCall),
            response_serializer=pb.LaneAnswer.SerializeToString,
        )
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),)
    )
    server.add_registered_method_handlers(SERVICE.full_name, handlers)

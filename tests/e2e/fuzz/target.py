"""The server under fuzzing, seen from a client: calls that answer with their
status instead of raising, a liveness check, and counts read from its database."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import Engine, text

from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.serverproc import ServerProcess

# Long enough for every call, short enough that a hung call fails the example.
CALL_TIMEOUT = 15.0

# Codes that mean "the server failed", never "the request was bad": UNKNOWN (an
# exception grpc mapped), INTERNAL (the servicer's last resort for a bug),
# DEADLINE_EXCEEDED (a hang: no call here should take CALL_TIMEOUT), UNAVAILABLE
# (the process is gone) and DATA_LOSS.
SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


@dataclass
class Outcome:
    code: grpc.StatusCode
    details: str
    response: object | None


class FuzzServer:
    """A running server with a client, and read-only access to its database for
    the "appends nothing" checks (counted where the events are, not through the
    API under test)."""

    def __init__(self, proc: ServerProcess, engine: Engine) -> None:
        self.proc = proc
        self.engine = engine
        self.channel = grpc.insecure_channel(proc.address)
        self.stub = sg.WorkflowServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    def call(self, rpc: str, request: object) -> Outcome:
        """Call `rpc` of WorkflowService; its status instead of an exception."""
        method = getattr(self.stub, rpc)
        try:
            response = method(request, timeout=CALL_TIMEOUT)
        except grpc.RpcError as exc:
            return Outcome(exc.code(), exc.details() or "", None)
        return Outcome(grpc.StatusCode.OK, "", response)

    def call_raw(self, rpc: str, body: bytes) -> Outcome:
        """Send `body` as the request bytes of `rpc`, whatever they are."""
        method: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(
            f"/weft.v1.WorkflowService/{rpc}"
        )
        try:
            response = method(body, timeout=CALL_TIMEOUT)
        except grpc.RpcError as exc:
            return Outcome(exc.code(), exc.details() or "", None)
        return Outcome(grpc.StatusCode.OK, "", response)

    def assert_alive(self) -> None:
        """The process runs and its health check answers SERVING."""
        self.proc._check_alive()
        resp = self._health.Check(health_pb2.HealthCheckRequest(service=""), timeout=CALL_TIMEOUT)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING, resp

    def events_of(self, run_id: str) -> int:
        return self._count("SELECT count(*) FROM history_events WHERE run_id = :r", r=run_id)

    def status(self, run_id: str) -> str:
        with self.engine.connect() as conn:
            sql = text("SELECT status FROM runs WHERE run_id = :r")
            return str(conn.execute(sql, {"r": run_id}).scalar_one())

    def runs(self) -> int:
        return self._count("SELECT count(*) FROM runs")

    def _count(self, sql: str, **params: str) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(text(sql), params).scalar_one())

    def close(self) -> None:
        self.channel.close()
        self.proc.stop()
        self.engine.dispose()

"""The node's Prometheus metrics count what happened, and are served as text."""

from __future__ import annotations

import socket
import urllib.request

from orchestrator.server import Server
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_metrics_count_rpcs_events_and_tasks(
    server: Server, stub: sg.WorkflowServiceStub
) -> None:
    wf = Driver(stub)
    await wf.start()
    await wf.decide(await wf.poll_decision(), complete())

    sample = server.metrics.registry.get_sample_value
    assert sample("weft_events_appended_total") == 5
    assert sample("weft_tasks_claimed_total", {"kind": "decision"}) == 1
    assert sample("weft_rpc_duration_seconds_count", {"method": "StartWorkflow", "code": "OK"}) == 1

    port = _free_port()
    server.metrics.serve(f"127.0.0.1:{port}")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert "weft_events_appended_total 5.0" in text

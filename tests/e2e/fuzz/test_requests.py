"""Fuzzing every RPC of WorkflowService with plausible and hostile requests.

For each request: the answer is OK or a status that names the caller's mistake
(never UNKNOWN, INTERNAL or a hang); the server process still runs and answers
its health check; and a refused call appends nothing, neither to the run the
requests aim at (its events are counted in the database before and after) nor
as a new run anywhere.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from sdk.api.weft.v1 import service_pb2 as s
from tests.e2e.fuzz import strategies as fz
from tests.e2e.fuzz.runs import PreparedRun, prepare_run
from tests.e2e.fuzz.target import SERVER_FAULTS, FuzzServer

SERVICE = s.DESCRIPTOR.services_by_name["WorkflowService"]
RPCS = [m.name for m in SERVICE.methods]
# Examples per RPC. An idle poll costs the whole long poll, so fewer of those.
EXAMPLES = {
    "PollForDecisionTask": 6,
    "PollForActivityTask": 6,
    "GetWorkflowHistory": 50,
    "SignalWorkflow": 50,
}
DEFAULT_EXAMPLES = 25
NEW_IDS = itertools.count()
# Task-token answers that keep their task (a heartbeat answers the same one again).
KEEPS_TASK = frozenset({"RecordActivityHeartbeat"})


class Target:
    """The run the requests aim at, replaced by a fresh one when an accepted call
    may have used up its tasks or closed it."""

    def __init__(self, server: FuzzServer) -> None:
        self.server = server
        self.run: PreparedRun = prepare_run(server)

    def hints(self) -> dict[str, Callable[[], st.SearchStrategy[Any]]]:
        # st.builds calls at draw time: always the current run's values.
        def now(get: Callable[[PreparedRun], Any]) -> Callable[[], st.SearchStrategy[Any]]:
            return lambda: st.builds(lambda: get(self.run))

        return {
            "namespace": lambda: st.sampled_from(["", "default"]),
            "workflow_id": lambda: st.one_of(
                now(lambda r: r.workflow_id)(),
                now(lambda r: r.workflow_id)(),
                st.builds(lambda: f"fz-new-{next(NEW_IDS)}"),
            ),
            "run_id": lambda: st.one_of(st.just(""), now(lambda r: r.run_id)()),
            "task_list": lambda: st.one_of(
                now(lambda r: r.task_list)(), now(lambda r: r.activity_list)()
            ),
            "task_token": lambda: st.one_of(
                now(lambda r: r.decision_token)(), now(lambda r: r.activity_token)()
            ),
            "next_page_token": lambda: st.one_of(
                now(lambda r: r.page_token)(),
                # Well-formed cursors of the run's own, with any numbers in them.
                st.builds(
                    lambda r, first, last: json.dumps([r, first, last]).encode(),
                    now(lambda r: r.run_id)(),
                    fz.cursor_ints(),
                    fz.cursor_ints(),
                ),
                st.builds(
                    lambda at, r: json.dumps([at, r]).encode(),
                    fz.hostile_text() | st.sampled_from(["2024-01-01T00:00:00", "0001-01-01"]),
                    now(lambda r: r.run_id)(),
                ),
            ),
            "name": lambda: st.one_of(st.just("order"), now(lambda r: r.type_name)()),
            "signal_name": lambda: st.just("go"),
            # A repeated request id is a retry: it appends nothing whatever else it says.
            "request_id": lambda: st.builds(lambda: f"fz-req-{next(NEW_IDS)}"),
        }

    def after_ok(self, rpc: str, request: Message) -> None:
        """A fresh run when this accepted call closed the run or answered its task."""
        run = self.run
        token = getattr(request, "task_token", b"")
        answered = rpc not in KEEPS_TASK and token in (run.decision_token, run.activity_token)
        if answered or self.server.status(run.run_id) != "open":
            self.run = prepare_run(self.server)


def check_request(server: FuzzServer, target: Target, rpc: str, request: Message) -> None:
    runs, events = server.runs(), server.events_of(target.run.run_id)
    out = server.call(rpc, request)
    assert out.code not in SERVER_FAULTS, f"{rpc} answered {out.code.name}: {out.details}"
    if out.code != grpc.StatusCode.OK:
        assert server.events_of(target.run.run_id) == events, f"refused {rpc} appended events"
        assert server.runs() == runs, f"refused {rpc} created a run"
    server.assert_alive()
    if out.code == grpc.StatusCode.OK:
        target.after_ok(rpc, request)


@pytest.fixture(scope="module")
def target(fuzz_server: FuzzServer) -> Target:
    return Target(fuzz_server)


@pytest.mark.parametrize("rpc", RPCS)
def test_any_request_gets_a_proper_status_and_a_refusal_changes_nothing(
    fuzz_server: FuzzServer, target: Target, rpc: str
) -> None:
    method = SERVICE.methods_by_name[rpc]
    requests = fz.messages(method.input_type, target.hints())

    @fz.fuzz_settings(EXAMPLES.get(rpc, DEFAULT_EXAMPLES))
    @given(request=requests)
    def fuzz(request: Message) -> None:
        check_request(fuzz_server, target, rpc, request)

    fuzz()

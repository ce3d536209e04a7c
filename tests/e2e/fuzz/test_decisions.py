"""Fuzzing the decision lists a decider answers with (RespondDecisionTaskCompleted).

Each example is a run of its own, sometimes with an activity, a timer, a lock
and a marker behind it so that decisions can name ids the run has (duplicate
activity and timer ids, cancels of known and unknown ones, locks held and not),
answered with a list of decisions of any kind, mostly plausible, some hostile.

For each answer: a proper status (never UNKNOWN, INTERNAL or a hang); the
process alive; a refused answer appends nothing to the run and starts no run
(children, continue-as-new); an accepted one cannot be applied twice; and the
run can still be described and its history read, whatever it was told.
"""

from __future__ import annotations

import grpc
from hypothesis import given
from hypothesis import strategies as st

from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2 as s
from tests.e2e.fuzz import strategies as fz
from tests.e2e.fuzz.runs import PreparedRun, prepare_run
from tests.e2e.fuzz.target import SERVER_FAULTS, FuzzServer

EXAMPLES = 50


def answer(server: FuzzServer, run: PreparedRun, decisions: list[d.Decision]) -> None:
    request = s.RespondDecisionTaskCompletedRequest(
        task_token=run.decision_token, decisions=decisions, identity="fuzz"
    )
    runs, events = server.runs(), server.events_of(run.run_id)
    out = server.call("RespondDecisionTaskCompleted", request)
    assert out.code not in SERVER_FAULTS, f"answered {out.code.name}: {out.details}"
    if out.code != grpc.StatusCode.OK:
        assert server.events_of(run.run_id) == events, "a refused answer appended events"
        assert server.runs() == runs, "a refused answer started a run"
    else:
        events = server.events_of(run.run_id)
        again = server.call("RespondDecisionTaskCompleted", request)
        assert again.code not in SERVER_FAULTS | {grpc.StatusCode.OK}, f"answered twice: {again}"
        assert server.events_of(run.run_id) == events, "a second answer appended events"
    server.assert_alive()


def assert_readable(server: FuzzServer, run: PreparedRun) -> None:
    for rpc, request in (
        ("DescribeWorkflow", s.DescribeWorkflowRequest(execution=run.execution)),
        ("GetWorkflowHistory", s.GetWorkflowHistoryRequest(execution=run.execution)),
    ):
        out = server.call(rpc, request)
        assert out.code == grpc.StatusCode.OK, f"{rpc} after the answer: {out.code.name}"


def test_any_decision_list_gets_a_proper_status_and_a_refusal_changes_nothing(
    fuzz_server: FuzzServer,
) -> None:
    @fz.fuzz_settings(EXAMPLES)
    @given(with_work=st.booleans(), decisions=st.lists(fz.decisions({}), max_size=6))
    def fuzz(with_work: bool, decisions: list[d.Decision]) -> None:
        run = prepare_run(fuzz_server, with_work=with_work)
        answer(fuzz_server, run, decisions)
        assert_readable(fuzz_server, run)

    fuzz()

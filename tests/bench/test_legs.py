"""The legs `bench.hotpath` prints: each task's, from its start to the
transition its answer made, read from a real run's history on the server's
clock, one per decision task and one per activity."""

from __future__ import annotations

from datetime import timedelta

from bench import workload
from bench.drive import HandOffs, hand_offs
from orchestrator.server import Server
from sdk import ActivityWorker, AsyncClient, DeciderWorker

STEPS = 3


async def test_each_task_of_a_chain_has_its_leg(server: Server) -> None:
    async with AsyncClient(f"127.0.0.1:{server.port}") as client:
        deciders = DeciderWorker(
            client, task_lists=[workload.TASK_LIST], deciders=[workload.Chain()], concurrency=2
        )
        runner = ActivityWorker(
            client, task_lists=[workload.TASK_LIST], activities=[workload.noop], concurrency=2
        )
        async with deciders, runner:
            run = await client.start_workflow(
                "bench-chain", {"k": STEPS, "key": "legs"}, task_list=workload.TASK_LIST
            )
            await client.result(run.workflow_id, timeout=timedelta(seconds=20))
        events = await client.history(run.workflow_id)
    legs = HandOffs()
    hand_offs(events, legs)
    # A decision task per activity, and one more that completes the run.
    assert len(legs.decision_leg) == STEPS + 1
    assert len(legs.activity_leg) == STEPS
    by_id = {e.event_id: e for e in events}
    first = next(e for e in events if e.type == "ActivitySuccess")
    began = by_id[int(first.get("started_event_id"))]
    assert began.type == "ActivityStarted"
    expected = (first.timestamp - began.timestamp).total_seconds() * 1000
    assert legs.activity_leg[0] == expected
    assert all(leg >= 0 for leg in legs.decision_leg + legs.activity_leg)
    assert legs.summary()["decision_leg_p50_ms"] >= 0

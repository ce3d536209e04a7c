"""The run row's state is always the fold of its history, and the tasks and
deadlines tables always hold exactly what that state calls for (ARCHITECTURE.md,
"Mutable state and the event log"). Workflows are driven through the real gRPC
server; the database is then read directly, behind the server's back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, create_engine, select

from orchestrator.engine import derived
from orchestrator.engine.events import fold
from orchestrator.engine.state import RunKey, RunState
from orchestrator.server import Server
from orchestrator.store import migrate
from orchestrator.store.schema import deadlines, history_events, lock_waiters, locks, runs, tasks
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import history_pb2 as h
from sdk.api.weft.v1 import service_pb2 as s
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, complete, dur, payload, schedule, unique, wait_until


@pytest.fixture
def db(db_url: str, server: Server) -> Iterator[Engine]:
    """A plain synchronous connection to the server's database."""
    engine = create_engine(migrate.sync_url(db_url))
    yield engine
    engine.dispose()


def timer(timer_id: str, seconds: float) -> d.Decision:
    return d.Decision(
        start_timer=d.StartTimerDecision(timer_id=timer_id, start_to_fire_timeout=dur(seconds))
    )


def marker(name: str) -> d.Decision:
    return d.Decision(
        record_marker=d.RecordMarkerDecision(marker_name=name, details=payload({"m": name}))
    )


async def signal(wf: Driver, name: str) -> None:
    await wf.stub.SignalWorkflow(
        s.SignalWorkflowRequest(
            namespace=wf.namespace,
            execution=c.WorkflowExecution(workflow_id=wf.workflow_id),
            signal_name=name,
            input=payload({"signal": name}),
            request_id=unique("sig"),
        )
    )


async def heartbeat(wf: Driver, task: s.PollForActivityTaskResponse, details: object) -> None:
    await wf.stub.RecordActivityHeartbeat(
        s.RecordActivityHeartbeatRequest(task_token=task.task_token, details=payload(details))
    )


async def has_event(wf: Driver, event_type: str) -> bool:
    return event_type in await wf.types()


async def test_state_is_the_fold_of_history_and_rows_match_it(
    stub: sg.WorkflowServiceStub, db: Engine
) -> None:
    acts = unique("acts")

    # 1. Runs to completion: activities (success, failure), a heartbeat, a timer,
    #    a signal, a marker.
    done = Driver(stub)
    await done.start()
    await done.decide(
        await done.poll_decision(),
        schedule("ok", "work", acts, start_to_close=30, heartbeat=10),
        schedule("bad", "work", acts, start_to_close=30),
        timer("short", 0.2),
        marker("first"),
    )
    ok = await done.poll_activity(acts)
    await heartbeat(done, ok, {"progress": 50})
    await done.finish_activity(ok)
    bad = await done.poll_activity(acts)
    await stub.RespondActivityTaskFailed(
        s.RespondActivityTaskFailedRequest(
            task_token=bad.task_token, reason="boom", details=payload("why"), identity="r"
        )
    )
    await signal(done, "go")
    await wait_until(lambda: has_event(done, "TimerExpired"))
    while (await done.types())[-1] != "WorkflowSuccess":
        task = await done.poll_decision()
        if task.task_token:
            await done.decide(task, marker("closing"), complete("all done"))

    # 2. Left open with everything pending: a started activity with a heartbeat,
    #    an unstarted one with schedule-to-start/close timeouts, a long timer,
    #    a started decision task and a queued one behind it.
    busy = Driver(stub)
    await busy.start(decider_timeout=dur(600))
    await busy.decide(
        await busy.poll_decision(),
        schedule("running", "work", acts, start_to_close=600, heartbeat=300),
        schedule("waiting", "other", unique("idle"), schedule_to_start=600, schedule_to_close=900),
        timer("long", 3600),
        marker("open"),
    )
    running = await busy.poll_activity(acts)
    await heartbeat(busy, running, {"progress": 10})
    await signal(busy, "first")
    assert (await busy.poll_decision()).task_token  # started, never answered
    await signal(busy, "second")  # DeciderScheduled queued behind the started task

    # 3. Terminated with work pending: everything abandoned.
    gone = Driver(stub)
    await gone.start()
    await gone.decide(
        await gone.poll_decision(),
        schedule("never", "work", unique("nobody"), start_to_close=60),
        timer("never", 3600),
    )
    await stub.TerminateWorkflow(
        s.TerminateWorkflowRequest(
            namespace=gone.namespace,
            execution=c.WorkflowExecution(workflow_id=gone.workflow_id),
            reason="test",
        )
    )

    checked = check_all_runs(db)
    assert checked == {done.run_id: "completed", busy.run_id: "open", gone.run_id: "terminated"}

    stored = load(db, busy.run_id)
    assert set(stored.activities) == {"running", "waiting"}
    assert stored.activities["running"].heartbeat_details  # kept in state, not in history
    assert set(stored.timers) == {"long"}
    assert stored.decider.started_id and stored.decider.scheduled_id


async def test_lock_state_and_rows_are_the_fold_of_history(
    stub: sg.WorkflowServiceStub, db: Engine
) -> None:
    name, other = unique("lock"), unique("lock")

    def lock(decision: str, lock_name: str) -> d.Decision:
        if decision == "request":
            return d.Decision(request_lock=d.RequestLockDecision(lock_name=lock_name))
        return d.Decision(release_lock=d.ReleaseLockDecision(lock_name=lock_name))

    runs_ = [Driver(stub) for _ in range(4)]
    for wf in runs_:
        await wf.start()
        await wf.decide(await wf.poll_decision(), lock("request", name), lock("request", other))
    holder, _, quitter, last = runs_
    # The holder lets go of one lock; a waiter is terminated; the last one withdraws one.
    await holder.decide(await holder.poll_decision(), lock("release", other))
    await stub.TerminateWorkflow(
        s.TerminateWorkflowRequest(execution=c.WorkflowExecution(workflow_id=quitter.workflow_id))
    )
    await signal(last, "wake")
    await last.decide(await last.poll_decision(), lock("release", name))

    # Children: one open, one finished and reported, one taken by its parent's close.
    parent = Driver(stub)
    await parent.start()
    kids = [unique("kid") for _ in range(3)]
    await parent.decide(
        await parent.poll_decision(),
        *(
            d.Decision(
                start_child_workflow=d.StartChildWorkflowDecision(
                    workflow_id=kid, workflow_type=c.WorkflowType(name="kid"), task_list=kid
                )
            )
            for kid in kids
        ),
    )
    finished = Driver(stub)
    finished.workflow_id, finished.task_list = kids[0], kids[0]
    await finished.decide(await finished.poll_decision(), d.Decision(complete_workflow={}))
    statuses = check_all_runs(db)
    assert sorted(statuses.values()).count("open") == 3 + 1 + 2
    assert set(load(db, parent.run_id).children) == set(kids[1:])
    await stub.TerminateWorkflow(
        s.TerminateWorkflowRequest(execution=c.WorkflowExecution(workflow_id=parent.workflow_id))
    )

    statuses = check_all_runs(db)
    assert sorted(statuses.values()) == ["completed"] + ["open"] * 3 + ["terminated"] * 4
    assert set(load(db, holder.run_id).locks) == {name}


def load(db: Engine, run_id: str) -> RunState:
    with db.connect() as conn:
        raw = conn.scalar(select(runs.c.state).where(runs.c.run_id == run_id))
    return RunState.from_json(raw)


def _naive(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)


def check_all_runs(db: Engine) -> dict[str, str]:
    """Check every run row; returns run id -> status."""
    out: dict[str, str] = {}
    with db.connect() as conn:
        for row in conn.execute(select(runs)):
            where = f"run {row.run_id} ({row.workflow_id})"
            events = [
                h.HistoryEvent.FromString(r.data)
                for r in conn.execute(
                    select(history_events.c.data)
                    .where(history_events.c.run_id == row.run_id)
                    .order_by(history_events.c.event_id)
                )
            ]
            ids = [e.event_id for e in events]
            assert ids == list(range(1, len(ids) + 1)), f"{where}: event ids {ids}"
            assert row.history_length == len(events), where

            stored = RunState.from_json(row.state)
            rebuilt = fold(RunKey(row.namespace, row.workflow_id, row.run_id), events)
            assert rebuilt.folded_part() == stored.folded_part(), where
            assert stored.status == row.status, where

            task_rows = {
                (t.namespace, t.kind, t.task_list, t.scheduled_id)
                for t in conn.execute(select(tasks).where(tasks.c.run_id == row.run_id))
            }
            wanted_tasks = {
                (stored.namespace, ref.kind, ref.task_list, ref.scheduled_id)
                for ref in derived.tasks(stored)
            }
            assert task_rows == wanted_tasks, where

            deadline_rows = {
                (dl.kind, dl.ref_id): dl.due
                for dl in conn.execute(select(deadlines).where(deadlines.c.run_id == row.run_id))
            }
            wanted_deadlines = {k: _naive(due) for k, due in derived.deadlines(stored).items()}
            assert deadline_rows == wanted_deadlines, where

            lock_rows = {
                (lk.lock_name, True, lk.requested_id)
                for lk in conn.execute(select(locks).where(locks.c.run_id == row.run_id))
            } | {
                (w.lock_name, False, w.requested_id)
                for w in conn.execute(
                    select(lock_waiters).where(lock_waiters.c.run_id == row.run_id)
                )
            }
            wanted_locks = {
                (name, claim.held, claim.requested_id)
                for name, claim in derived.lock_claims(stored).items()
            }
            assert lock_rows == wanted_locks, where
            out[row.run_id] = row.status
    return out

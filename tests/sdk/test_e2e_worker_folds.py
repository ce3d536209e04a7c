"""The workers fold their next poll into the answer of a quick task (`Lane`):
one call per task instead of two, a decider's cache that holds the run when its
next task comes to another of its polls, and a shutdown that does not wait for
a folded poll to expire."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
from datetime import timedelta
from pathlib import Path

import pytest
import structlog.testing

from orchestrator.config import ServerConfig
from orchestrator.server import Server
from sdk import (
    ActivityDefinition,
    ActivityWorker,
    AsyncClient,
    Decider,
    DeciderWorker,
    DecisionTask,
    activity,
)
from tests.e2e.security.auth_matrix_setup import parked
from tests.helpers import rpc_calls, wait_until
from tests.sdk.conftest import make_decider, types, wait_for_event
from tests.serverproc import ServerProcess

WAIT = timedelta(seconds=20)
CHAIN = 6


@activity(name="step")
async def step(n: int) -> int:
    return n + 1


def chain(task_list: str) -> Decider:
    """Decides CHAIN `step`s one after another, then completes with the count."""

    def decide(task: DecisionTask) -> None:
        done = [a for a in task.activities.values() if a.status == "succeeded"]
        if len(done) == CHAIN:
            task.complete(len(done))
        elif len(task.activities) == len(done):
            task.schedule_activity(f"s{len(done)}", step, len(done), task_list=task_list)

    return make_decider("fold-chain", decide)


@pytest.fixture
def server_config(db_url: str) -> ServerConfig:
    """A long poll that outlasts each test, folded polls too: a folded poll never
    expires in it."""
    return ServerConfig(
        db_url=db_url, listen="127.0.0.1:0", long_poll=60.0, folded_poll=60.0, drain_grace=1.0
    )


def folding(
    client: AsyncClient,
    task_list: str,
    decider: Decider,
    activities: list[ActivityDefinition],
    deciders: int = 8,
) -> tuple[DeciderWorker, ActivityWorker]:
    """A decider worker and a one-slot runner on `task_list` that fold the next
    poll into every answer (no task of these tests counts as slow)."""
    decider_worker = DeciderWorker(
        client, task_lists=[task_list], deciders=[decider], concurrency=deciders
    )
    runner = ActivityWorker(client, task_lists=[task_list], activities=activities, concurrency=1)
    # (This loop serves the server too: a stall must not make a task look slow.)
    decider_worker.fold_within = runner.fold_within = 30.0
    return decider_worker, runner


async def test_quick_tasks_poll_in_their_answers(
    client: AsyncClient, server: Server, task_list: str
) -> None:
    decider_worker, runner = folding(client, task_list, chain(task_list), [step], deciders=4)
    async with decider_worker, runner:
        run = await client.start_workflow("fold-chain", task_list=task_list)
        assert await client.result(run.workflow_id, timeout=WAIT) == CHAIN
    history = types(await client.history(run.workflow_id))
    assert history.count("ActivitySuccess") == CHAIN
    # The only polls of their own were each lane's first: every later task came
    # to a poll folded into the answer of the one before. (A decision lane that
    # never got a task may not be counted yet: its poll was cut at the exit.)
    assert rpc_calls(server, "PollForActivityTask") == 1
    assert rpc_calls(server, "PollForDecisionTask") <= 4
    # A decision task may come to another lane while the last answer's folded
    # poll still waits: the run is in the cache by then, so only the first task
    # of the run reads the history.
    assert decider_worker.cache is not None
    assert (decider_worker.cache.hits, decider_worker.cache.misses) == (CHAIN, 1)


@activity(name="flaky")
async def flaky(attempt: int) -> int:
    if attempt == 1:
        raise ValueError("the first try fails")
    return attempt


async def test_a_failed_activity_polls_in_its_answer_too(
    client: AsyncClient, server: Server, task_list: str
) -> None:
    """Each step fails once and is scheduled again: the failures' answers
    carry the runner's next poll as the results' do."""

    def decide(task: DecisionTask) -> None:
        done = [a for a in task.activities.values() if a.status == "succeeded"]
        if len(done) == CHAIN:
            task.complete(len(done))
        elif all(a.status in ("succeeded", "failed") for a in task.activities.values()):
            step_no, failed = len(done), f"s{len(done)}-1" in task.activities
            attempt = 2 if failed else 1
            task.schedule_activity(f"s{step_no}-{attempt}", flaky, attempt, task_list=task_list)

    decider = make_decider("fold-flaky", decide)
    decider_worker, runner = folding(client, task_list, decider, [flaky])
    async with decider_worker, runner:
        run = await client.start_workflow("fold-flaky", task_list=task_list)
        assert await client.result(run.workflow_id, timeout=WAIT) == CHAIN
    history = types(await client.history(run.workflow_id))
    assert (history.count("ActivityFailed"), history.count("ActivitySuccess")) == (CHAIN, CHAIN)
    assert rpc_calls(server, "RespondActivityTaskFailed") == CHAIN
    assert rpc_calls(server, "PollForActivityTask") == 1


@activity(name="beats_then_fails")
async def beats_then_fails() -> None:
    activity.heartbeat(1)  # sent at once
    await asyncio.sleep(0.05)
    activity.heartbeat(2)  # kept until the heartbeat interval has passed
    raise ValueError("failed after beating")


async def test_no_heartbeat_goes_out_while_a_failure_waits_in_its_folded_poll(
    client: AsyncClient, server: Server, task_list: str
) -> None:
    """The failure's answer parks in its folded poll: the heartbeat the activity
    left behind is dropped, not sent for a task that is over."""

    def decide(task: DecisionTask) -> None:
        if task.is_first:
            heartbeat = timedelta(seconds=0.6)  # (an interval of 0.2 s)
            task.schedule_activity("a", beats_then_fails, task_list=task_list, heartbeat=heartbeat)
        elif task.activities["a"].status == "failed":
            task.complete("failed")

    decider = make_decider("fold-beats", decide)
    decider_worker, runner = folding(client, task_list, decider, [beats_then_fails])
    async with decider_worker, runner:
        run = await client.start_workflow("fold-beats", task_list=task_list)
        assert await client.result(run.workflow_id, timeout=WAIT) == "failed"
        await asyncio.sleep(0.6)  # three heartbeat intervals, the runner's poll parked
    # The first heartbeat (at most: a slow loop may cut it short), never the second.
    assert rpc_calls(server, "RecordActivityHeartbeat") <= 1


@activity(name="patient")
async def patient() -> str:
    deadline = time.monotonic() + 30  # (no test waits this long for it)
    while time.monotonic() < deadline:
        activity.heartbeat()
        await asyncio.sleep(0.02)
    return "never canceled"


async def test_a_canceled_activity_polls_in_its_answer_too(
    client: AsyncClient, server: Server, task_list: str
) -> None:
    """An activity canceled on a signal: its answer carries the runner's next
    poll, which gets the step scheduled after it."""

    def decide(task: DecisionTask) -> None:
        acts = task.activities
        if task.is_first:
            task.schedule_activity(
                "a", patient, task_list=task_list, heartbeat=timedelta(seconds=0.3)
            )
        elif "b" in acts and acts["b"].status == "succeeded":
            task.complete(acts["a"].status)
        elif acts["a"].status == "canceled" and "b" not in acts:
            task.schedule_activity("b", step, 1, task_list=task_list)
        elif task.signals("cancel") and acts["a"].status == "started":
            task.cancel_activity("a")

    decider = make_decider("fold-cancel", decide)
    decider_worker, runner = folding(client, task_list, decider, [patient, step])
    async with decider_worker, runner:
        run = await client.start_workflow("fold-cancel", task_list=task_list)
        await wait_for_event(client, run.workflow_id, "ActivityStarted")
        await client.signal(run.workflow_id, "cancel")
        assert await client.result(run.workflow_id, timeout=WAIT) == "canceled"
    assert rpc_calls(server, "RespondActivityTaskCanceled") == 1
    assert rpc_calls(server, "PollForActivityTask") == 1


async def test_a_shutdown_cuts_a_folded_poll_short_and_keeps_the_answer(
    client: AsyncClient, server: Server, task_list: str
) -> None:
    def decide(task: DecisionTask) -> None:
        if "once" not in task.activities:
            task.schedule_activity("once", step, 1, task_list=task_list)

    async with DeciderWorker(
        client, task_lists=[task_list], deciders=[make_decider("fold-once", decide)]
    ):
        run = await client.start_workflow("fold-once", task_list=task_list)
        runner = ActivityWorker(client, task_lists=[task_list], activities=[step], concurrency=1)
        runner.fold_within = 30.0
        await runner.__aenter__()
        try:

            async def answered() -> bool:
                return "ActivitySuccess" in types(await client.history(run.workflow_id))

            await wait_until(answered, timeout=15)
            # The answer is written and its folded poll waits (up to a minute).
            await parked(server, "activity", task_list)
            assert rpc_calls(server, "RespondActivityTaskCompleted") == 0  # (still in the call)
        finally:
            began = time.monotonic()
            await runner.__aexit__(None, None, None)
        assert time.monotonic() - began < 10
    assert runner.abandoned == 0
    assert types(await client.history(run.workflow_id)).count("ActivitySuccess") == 1


async def test_a_worker_stops_when_its_server_is_gone(server_config: ServerConfig) -> None:
    """Its polls fail, and the unregistering at the end is tried once, not for as
    long as the client's retry policy would wait for the server."""
    node = Server(server_config)
    await node.start()
    async with AsyncClient(f"127.0.0.1:{node.port}") as client:
        runner = ActivityWorker(client, task_lists=["gone"], activities=[step], concurrency=2)
        await runner.__aenter__()
        await node.stop(grace=0.5)
        began = time.monotonic()
        await runner.__aexit__(None, None, None)
        assert time.monotonic() - began < 10


async def test_a_worker_stops_while_its_server_is_still_out_of_reach() -> None:
    """A stop while the worker is still registering its session (the server not
    up yet) ends it at once, not when the client's retry policy gives up."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with AsyncClient(f"127.0.0.1:{port}") as client:
        runner = ActivityWorker(client, task_lists=["nowhere"], activities=[step])
        await runner.__aenter__()
        await asyncio.sleep(0.5)  # (registering: retried for up to a minute)
        began = time.monotonic()
        await runner.__aexit__(None, None, None)
        assert time.monotonic() - began < 10


async def test_a_worker_stops_at_once_when_its_server_died_under_a_folded_poll(
    tmp_path: Path,
) -> None:
    """The server is killed while the runner's answer waits in its folded poll:
    at the stop the answer is sent again once (not for the whole grace), the
    worker is gone in a few seconds, and its log says the answer is unconfirmed
    (not that the activity completed)."""
    node = ServerProcess(
        f"sqlite:///{tmp_path / 'weft.db'}",
        tmp_path,
        long_poll="60s",
        extra_args=("--folded-poll", "60s"),
    )
    await node.start()
    try:
        async with AsyncClient(node.address) as client:

            def decide(task: DecisionTask) -> None:
                if "once" not in task.activities:
                    task.schedule_activity("once", step, 1, task_list="died")

            runner = ActivityWorker(client, task_lists=["died"], activities=[step], concurrency=1)
            runner.fold_within = 30.0
            # (The decider's own last answer would wait out its grace for the dead server.)
            async with DeciderWorker(
                client,
                task_lists=["died"],
                deciders=[make_decider("fold-died", decide)],
                grace=timedelta(seconds=2),
            ):
                await runner.__aenter__()
                run = await client.start_workflow("fold-died", task_list="died")

                async def answered() -> bool:
                    return "ActivitySuccess" in types(await client.history(run.workflow_id))

                await wait_until(answered, timeout=15)
                node.kill9()
                began = time.monotonic()
                with structlog.testing.capture_logs() as logs:
                    await runner.__aexit__(None, None, None)
                assert time.monotonic() - began < runner.grace.total_seconds() / 2
                assert runner.abandoned == 0
        said = [e["event"] for e in logs if e.get("workflow_id") == run.workflow_id]
        assert said == ["activity.answer_unconfirmed"]
    finally:
        node.stop()


async def test_a_worker_stopping_long_after_its_answers_sends_none_again(
    server_config: ServerConfig, task_list: str
) -> None:
    """With a short folded poll, each answer's call comes back (empty) soon after
    the answer, and the lane polls on its own: a worker stopped later has no
    answer in flight to send again, so the server refuses none (with the folded
    poll as long as the long poll, the last answers were still in their calls at
    the stop, and were sent again: NOT_FOUND)."""
    node = Server(dataclasses.replace(server_config, folded_poll=0.3))
    await node.start()
    try:
        async with AsyncClient(f"127.0.0.1:{node.port}") as client:
            decider_worker, runner = folding(client, task_list, chain(task_list), [step])
            async with decider_worker, runner:
                run = await client.start_workflow("fold-chain", task_list=task_list)
                assert await client.result(run.workflow_id, timeout=WAIT) == CHAIN

                async def calls_back() -> bool:
                    # Every answer's call returned, and the workers hold none out
                    # (the server counts a call just before its answer is sent).
                    return (
                        rpc_calls(node, "RespondActivityTaskCompleted") == CHAIN
                        and rpc_calls(node, "RespondDecisionTaskCompleted") == CHAIN + 1
                        and not runner._folding
                        and not decider_worker._folding
                    )

                await wait_until(calls_back, timeout=15)
        for method in ("RespondActivityTaskCompleted", "RespondDecisionTaskCompleted"):
            assert rpc_calls(node, method, "NOT_FOUND") == 0, method
    finally:
        await node.stop(grace=0.5)

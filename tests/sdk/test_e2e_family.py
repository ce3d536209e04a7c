"""End-to-end: deciders that start child workflows, signal other workflows and
take locks, run by a `DeciderWorker` against a real in-process server, on SQLite
and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from sdk import AsyncClient, DeciderWorker, DecisionTask
from tests.helpers import unique
from tests.sdk.conftest import make_decider

WAIT = timedelta(seconds=20)


def parent(task: DecisionTask) -> None:
    plan = task.input
    kid = task.children.get(plan["child"])
    if kid is None:
        task.start_child_workflow(
            plan["child"], "family-child", {"n": plan["n"]}, task_list=plan["tl"]
        )
    elif kid.status == "succeeded":
        task.signal_external_workflow(plan["listener"], "child-done", kid.result)
        task.complete({"child": kid.result, "run": kid.run_id})
    elif not kid.is_open:
        task.fail("child ended badly", {"status": kid.status})


def child(task: DecisionTask) -> None:
    lock = task.locks.get("family")
    if lock is None:
        task.request_lock("family")
    elif lock.held:
        task.complete(task.input["n"] * 2)


def listener(task: DecisionTask) -> None:
    heard = task.signals("child-done")
    if heard:
        task.complete(heard[0].input)


async def test_a_parent_waits_for_its_child_and_tells_another(
    client: AsyncClient, task_list: str
) -> None:
    deciders = [
        make_decider("family-parent", parent),
        make_decider("family-child", child),
        make_decider("family-listener", listener),
    ]
    async with DeciderWorker(client, task_lists=[task_list], deciders=deciders):
        ear = await client.start_workflow("family-listener", task_list=task_list)
        kid = unique("kid")
        plan = {"child": kid, "n": 21, "tl": task_list, "listener": ear.workflow_id}
        run = await client.start_workflow("family-parent", plan, task_list=task_list)
        result = await client.result(run.workflow_id, timeout=WAIT)
        heard = await client.result(ear.workflow_id, timeout=WAIT)
    assert result["child"] == 42 and heard == 42
    child_history = await client.history(kid)
    assert child_history[0].get("parent_workflow_id") == run.workflow_id
    assert result["run"] == (await client.describe(kid)).info.run_id
    assert "LockAcquired" in [e.type for e in child_history]
    assert await client.list_locks("family") == []  # the child's close released it


async def test_namespaces_through_the_client(client: AsyncClient) -> None:
    name = unique("ns")
    assert (await client.describe_namespace(name)).registered is False
    await client.register_namespace(name, retention="max(24h, 5)", description="billing")
    info = await client.describe_namespace(name)
    assert (info.retention, info.description, info.registered) == ("max(24h, 5)", "billing", True)
    await client.register_namespace(name, description="billing v2")  # keeps the retention
    assert (await client.describe_namespace(name)).retention == "max(24h, 5)"

"""Registered definitions (STEPS.md "Definitions and versions"), on SQLite and
PostgreSQL: a start copies the type's definition into `WorkflowStarted`, so a
later registration never changes a run under way while new runs (and
continue-as-new) take the new one; a definition over the limit is refused with
INVALID_ARGUMENT and stores nothing; a start without a version finds the
definition registered as version "1"."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from orchestrator.engine.limits import MAX_DEFINITION_BYTES
from orchestrator.server import Server
from sdk import AsyncClient, Event, InvalidArgumentError
from sdk.api.weft.v1 import common_pb2 as c
from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.helpers import Driver, unique

FIRST = "name: {name}\nsteps:\n  - return first\n"
SECOND = "name: {name}\nsteps:\n  - log changed\n  - return second\n"


@pytest.fixture
async def client(server: Server) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(f"127.0.0.1:{server.port}") as sdk_client:
        yield sdk_client


async def started(client: AsyncClient, workflow_id: str, run_id: str = "") -> Event:
    events = await client.history(workflow_id, run_id=run_id)
    assert events[0].type == "WorkflowStarted"
    return events[0]


async def test_a_run_keeps_the_definition_it_started_with(client: AsyncClient) -> None:
    name, task_list = unique("def"), unique("tl")
    first, second = FIRST.format(name=name), SECOND.format(name=name)
    await client.register_workflow_type(
        name, version="1", default_task_list=task_list, definition=first
    )
    old = await client.start_workflow(name, version="1")
    assert (await started(client, old.workflow_id)).attributes["definition"] == first

    await client.register_workflow_type(name, version="1", definition=second)
    assert (await started(client, old.workflow_id)).attributes["definition"] == first
    new = await client.start_workflow(name, version="1")
    event = await started(client, new.workflow_id)
    assert event.attributes["definition"] == second
    # the re-registration without a task list kept the one registered before
    assert event.attributes["task_list"] == task_list

    # Registering again without a definition (as a decider registering its
    # task list does) keeps the definition, like every other default.
    await client.register_workflow_type(name, version="1", default_task_list=task_list)
    latest = await client.start_workflow(name, version="1")
    assert (await started(client, latest.workflow_id)).attributes["definition"] == second


async def test_a_definition_over_the_limit_is_refused_and_stores_nothing(
    client: AsyncClient,
) -> None:
    name, task_list = unique("big"), unique("tl")
    first = FIRST.format(name=name)
    await client.register_workflow_type(name, default_task_list=task_list, definition=first)
    too_large = first + "#" * (MAX_DEFINITION_BYTES - len(first) + 1)
    with pytest.raises(InvalidArgumentError) as refused:
        await client.register_workflow_type(
            name, default_task_list=unique("other"), definition=too_large
        )
    message = refused.value.message
    assert f"definition is {MAX_DEFINITION_BYTES + 1} bytes" in message
    assert f"the definition limit is {MAX_DEFINITION_BYTES} bytes" in message
    run = await client.start_workflow(name)
    event = await started(client, run.workflow_id)
    assert event.attributes["definition"] == first
    assert event.attributes["task_list"] == task_list  # the refused request changed nothing

    # a new type refused outright is not registered at all
    fresh = unique("big")
    with pytest.raises(InvalidArgumentError):
        await client.register_workflow_type(fresh, default_task_list="tl", definition=too_large)
    with pytest.raises(InvalidArgumentError, match="task_list is required"):
        await client.start_workflow(fresh)


async def test_a_definition_of_exactly_the_limit_is_accepted(client: AsyncClient) -> None:
    name = unique("edge")
    text = FIRST.format(name=name)
    text += "#" * (MAX_DEFINITION_BYTES - len(text))
    await client.register_workflow_type(name, default_task_list="tl", definition=text)
    run = await client.start_workflow(name)
    assert (await started(client, run.workflow_id)).attributes["definition"] == text


async def test_a_start_without_a_version_finds_version_1(client: AsyncClient) -> None:
    """A step definition without `version` is version "1": `start NAME` reaches
    it, and the run is of version "1". A type registered without a version
    still comes first."""
    name, task_list = unique("v"), unique("tl")
    text = FIRST.format(name=name)
    await client.register_workflow_type(
        name, version="1", default_task_list=task_list, definition=text
    )
    run = await client.start_workflow(name)
    event = await started(client, run.workflow_id)
    assert event.attributes["workflow_type"] == {"name": name, "version": "1"}
    assert event.attributes["definition"] == text
    assert event.attributes["task_list"] == task_list
    assert (await client.describe(run.workflow_id)).info.version == "1"

    await client.register_workflow_type(name, default_task_list=task_list)  # version ""
    run = await client.start_workflow(name)
    event = await started(client, run.workflow_id)
    assert event.attributes["workflow_type"] == {"name": name}
    assert "definition" not in event.attributes


async def test_signal_with_start_snapshots_the_definition(client: AsyncClient) -> None:
    name = unique("sws")
    text = FIRST.format(name=name)
    await client.register_workflow_type(name, default_task_list=unique("tl"), definition=text)
    run = await client.signal_with_start(name, "go", workflow_id=unique("wf"))
    assert (await started(client, run.workflow_id)).attributes["definition"] == text


async def test_continue_as_new_takes_the_types_definition_now(
    client: AsyncClient, stub: sg.WorkflowServiceStub
) -> None:
    """The new run of a continue-as-new is a start: it snapshots the type's
    definition as registered at that moment; naming another type takes that
    type's."""
    wf = Driver(stub)
    name, other = unique("can"), unique("can-other")
    first, second = FIRST.format(name=name), SECOND.format(name=name)
    await client.register_workflow_type(name, version="1", definition=first)
    await client.register_workflow_type(other, version="2", definition=SECOND.format(name=other))
    run = await client.start_workflow(
        name, workflow_id=wf.workflow_id, version="1", task_list=wf.task_list
    )
    wf.run_id = run.run_id
    assert (await started(client, wf.workflow_id, wf.run_id)).attributes["definition"] == first

    await client.register_workflow_type(name, version="1", definition=second)
    task = await wf.poll_decision()
    await wf.decide(task, d.Decision(continue_as_new=d.ContinueAsNewDecision()))
    same = await client.describe(wf.workflow_id)
    event = await started(client, wf.workflow_id, same.info.run_id)
    assert event.attributes["continued_from_run_id"] == wf.run_id
    assert event.attributes["definition"] == second
    # the closed run still has the definition it started with
    assert (await started(client, wf.workflow_id, wf.run_id)).attributes["definition"] == first

    wf.run_id = same.info.run_id
    task = await wf.poll_decision()
    to_other = d.ContinueAsNewDecision(workflow_type=c.WorkflowType(name=other, version="2"))
    await wf.decide(task, d.Decision(continue_as_new=to_other))
    moved = await client.describe(wf.workflow_id)
    event = await started(client, wf.workflow_id, moved.info.run_id)
    assert event.attributes["workflow_type"] == {"name": other, "version": "2"}
    assert event.attributes["definition"] == SECOND.format(name=other)

"""Running step workflows for tests: a real in-process server (the `server`
fixture of tests/conftest.py), a `DeciderWorker` whose only decider is the
step interpreter, and an `ActivityWorker` with the test's activities.

Every run's history is replayed through a fresh interpreter before the
outcome is returned (`check_history`): each history the suite records is
also a determinism test.
"""

from __future__ import annotations

import textwrap
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sdk import ActivityWorker, AsyncClient, DeciderWorker, Event
from sdk.activity import ActivityDefinition
from sdk.errors import WorkflowOutcomeError
from tests.helpers import unique, wait_until
from workers.builtins import HttpPolicy
from workers.builtins import builtins as builtins_offered
from workers.steps.definition import parse
from workers.steps.interpreter import StepDecider, check_history

WAIT = timedelta(seconds=30)
FAST = timedelta(0)
"""The tests' timer floor: none, so that a `sleep 10ms` takes 10 ms (a decider's
is `limits.MIN_TIMER`)."""


@dataclass
class Outcome:
    """How a step workflow ended, and its history."""

    workflow_id: str
    run_id: str
    result: Any
    error: WorkflowOutcomeError | None
    history: list[Event]

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def reason(self) -> str:
        return self.error.reason if self.error is not None else ""

    @property
    def details(self) -> Any:
        return self.error.details if self.error is not None else None

    def types(self) -> list[str]:
        return [e.type for e in self.history]

    def steps(self) -> list[dict[str, Any]]:
        """The `step` markers' details, in order."""
        return [
            e.attributes["details"]
            for e in self.history
            if e.type == "Marker" and e.attributes.get("marker_name") == "step"
        ]

    def step_keys(self) -> list[str]:
        return [str(s["key"]) for s in self.steps()]

    def activities(self) -> list[dict[str, Any]]:
        return [e.attributes for e in self.history if e.type == "ActivityScheduled"]

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.history if e.type == kind]


def definition_text(yaml_text: str, name: str, task_list: str) -> str:
    """The test's YAML with a unique type name and the test's task list."""
    body = textwrap.dedent(yaml_text).strip("\n")
    return f"name: {name}\ntask_list: {task_list}\n{body}\n"


async def run_steps(
    client: AsyncClient,
    yaml_text: str,
    *,
    input: Any = None,
    activities: Sequence[ActivityDefinition] = (),
    builtins: bool = False,
    during: Callable[[AsyncClient, str], Awaitable[None]] | None = None,
    wait: timedelta = WAIT,
    decider: StepDecider | None = None,
) -> Outcome:
    """Start the workflow, wait for its close, check its history replays."""
    task_list = unique("steps")
    name = unique("wf")
    definition = parse(definition_text(yaml_text, name, task_list), f"{name}.yaml")
    await client.register_workflow_type(
        definition.name,
        version=definition.version,
        default_task_list=task_list,
        definition=definition.source,
    )
    # The tests' web servers listen on 127.0.0.1: allowed as `--allow-http 127.0.0.1` would.
    web = HttpPolicy.of(["127.0.0.1"])
    offered = [
        *activities,
        *(builtins_offered(allow_shell=True, allow_http=web) if builtins else ()),
    ]
    # No local definitions: the interpreter reads the snapshot in WorkflowStarted.
    fallback = decider or StepDecider(min_timer=FAST)
    worker = DeciderWorker(
        client,
        deciders=[],
        fallback=fallback,
        task_lists=[task_list],
        concurrency=2,
    )
    runner = (
        ActivityWorker(client, activities=offered, task_lists=[task_list], concurrency=8)
        if offered
        else None
    )
    async with worker:
        if runner is not None:
            await runner.__aenter__()
        try:
            run = await client.start_workflow(
                name, input, version=definition.version, task_list=task_list
            )
            if during is not None:
                await during(client, run.workflow_id)
            result: Any = None
            error: WorkflowOutcomeError | None = None
            try:
                result = await client.result(run.workflow_id, timeout=wait)
            except WorkflowOutcomeError as exc:
                error = exc
        finally:
            if runner is not None:
                await runner.__aexit__(None, None, None)
    history = await client.history(run.workflow_id)
    check_history(definition, history, run.run_id, run.workflow_id, min_timer=fallback.min_timer)
    return Outcome(run.workflow_id, run.run_id, result, error, history)


async def wait_for_marker(
    client: AsyncClient, workflow_id: str, step_type: str, timeout: float = 15.0
) -> list[Event]:
    """Wait until a step of `step_type` has started."""

    async def check() -> list[Event]:
        events = await client.history(workflow_id)
        hit = any(
            e.type == "Marker" and (e.attributes.get("details") or {}).get("type") == step_type
            for e in events
        )
        return events if hit else []

    return await wait_until(check, timeout=timeout)

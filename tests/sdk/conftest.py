"""Fixtures for the SDK's end-to-end tests: an `AsyncClient` on the in-process
server of `tests/conftest.py` (parametrised over SQLite and PostgreSQL), a
fresh task list per test, and small helpers to write deciders inline."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from orchestrator.server import Server
from sdk import AsyncClient, Decider, DecisionTask, Event
from tests.helpers import unique, wait_until

DecideFn = Callable[[DecisionTask], Awaitable[None] | None]


@pytest.fixture
def address(server: Server) -> str:
    return f"127.0.0.1:{server.port}"


@pytest.fixture
async def client(address: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(address, identity="e2e-client") as c:
        yield c


@pytest.fixture
def task_list() -> str:
    return unique("tl")


def make_decider(workflow_type: str, fn: DecideFn, *, task_list: str = "") -> Decider:
    """A `Decider` subclass for `workflow_type` whose `decide` is `fn` (sync or async)."""
    body: dict[str, Any] = {"workflow_type": workflow_type, "task_list": task_list}
    if inspect.iscoroutinefunction(fn):

        async def decide_async(self: Decider, task: DecisionTask) -> None:
            await fn(task)

        body["decide"] = decide_async
    else:

        def decide_sync(self: Decider, task: DecisionTask) -> None:
            fn(task)

        body["decide"] = decide_sync
    cls = type(f"Decider_{workflow_type}", (Decider,), body)
    decider: Decider = cls()
    return decider


async def truthy(value: Any) -> Any:
    """`value` as an awaitable, for `wait_until(lambda: truthy(...))` on local state."""
    return value


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


def only(events: list[Event], kind: str) -> Event:
    """The one event of type `kind` (fails if there are none or several)."""
    found = [e for e in events if e.type == kind]
    assert len(found) == 1, f"expected one {kind}, got {types(events)}"
    return found[0]


async def wait_for_event(
    client: AsyncClient, workflow_id: str, kind: str, *, run_id: str = "", timeout: float = 15.0
) -> list[Event]:
    """Wait until the run's history holds an event of type `kind`; the history."""

    async def check() -> list[Event]:
        events = await client.history(workflow_id, run_id=run_id)
        return events if kind in types(events) else []

    return await wait_until(check, timeout=timeout)

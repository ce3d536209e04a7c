"""`weft locks` and `weft locks release NAME` as real subprocesses against a real
`weft server`, and the locks in `weft describe`: what they print, and each
failure's exit code and one line."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from sdk.api.weft.v1 import decisions_pb2 as d
from sdk.api.weft.v1 import service_pb2_grpc as sg
from tests.cli.support import error_line, ok, ok_json, unreachable_address, weft
from tests.helpers import Driver, unique


async def _queue_up(address: str, name: str, n: int) -> list[str]:
    """n runs that ask for `name` one after another: the first holds it."""
    ids = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = sg.WorkflowServiceStub(channel)
        for _ in range(n):
            wf = Driver(stub)
            await wf.start()
            task = await wf.poll_decision()
            await wf.decide(task, d.Decision(request_lock=d.RequestLockDecision(lock_name=name)))
            ids.append(wf.workflow_id)
    return ids


def queue_up(address: str, name: str, n: int) -> list[str]:
    return asyncio.run(_queue_up(address, name, n))


def listing(address: str, *args: str) -> list[dict[str, Any]]:
    doc = ok_json(weft("locks", *args, "--json", address=address))
    locks: list[dict[str, Any]] = doc["locks"]
    return locks


def test_locks_lists_the_holder_then_the_waiters_in_order(address: str) -> None:
    name = unique("lock")
    ids = queue_up(address, name, 3)

    out = ok(weft("locks", address=address))
    mine = [line.split() for line in out.splitlines() if line.startswith(name)]
    assert [(row[1], row[-4] if row[1] == "holder" else row[3]) for row in mine] == [
        ("holder", ids[0]),
        ("waiting", ids[1]),
        ("waiting", ids[2]),
    ]

    [doc] = listing(address, "list", name)
    assert doc["lock_name"] == name
    assert doc["holder"]["workflow_id"] == ids[0]
    assert [w["workflow_id"] for w in doc["waiters"]] == ids[1:]
    assert doc["holder"]["since"].endswith("Z")


def test_locks_of_a_name_nobody_holds(address: str) -> None:
    name = unique("free")
    assert ok(weft("locks", "list", name, address=address)).strip() == (
        f"no lock named {name!r} is held"
    )
    assert listing(address, "list", name) == []


def test_release_hands_the_lock_on_and_the_holders_history_says_who(address: str) -> None:
    name = unique("lock")
    holder, waiter = queue_up(address, name, 2)
    out = ok(weft("locks", "release", name, "--reason", "stuck since Monday", address=address))
    assert f"released {name!r} from {holder}" in out
    assert f"granted to {waiter}" in out

    [doc] = listing(address, "list", name)
    assert doc["holder"]["workflow_id"] == waiter and doc["waiters"] == []
    events = ok_json(weft("history", holder, "--json", address=address))["events"]
    released = [e["attributes"] for e in events if e["type"] == "LockReleased"]
    assert len(released) == 1
    assert released[0]["forced"] is True
    assert released[0]["reason"] == "stuck since Monday"
    assert "(weft locks release)" in released[0]["identity"]
    waiter_events = ok_json(weft("history", waiter, "--json", address=address))["events"]
    assert "LockAcquired" in [e["type"] for e in waiter_events]

    # The last holder released: the lock is free.
    out = ok(weft("locks", "release", name, "--json", address=address))
    assert '"granted_workflow_id": ""' in out
    assert listing(address, "list", name) == []


def test_release_of_a_lock_nobody_holds_exits_3(address: str) -> None:
    name = unique("free")
    line = error_line(weft("locks", "release", name, address=address), "locks", 3)
    assert name in line


@pytest.mark.parametrize(
    "args",
    [("release",), ("unlock", "x"), ("list", "x" * 300)],
    ids=["no-name", "unknown-action", "name-too-long"],
)
def test_bad_locks_commands_exit_2(address: str, args: tuple[str, ...]) -> None:
    error_line(weft("locks", *args, address=address), "locks", 2)


def test_locks_with_no_server_exits_4() -> None:
    error_line(weft("locks", address=unreachable_address()), "locks", 4)


def test_describe_shows_the_runs_locks(address: str) -> None:
    name = unique("lock")
    holder, waiter = queue_up(address, name, 2)
    out = ok(weft("describe", waiter, address=address))
    assert "locks:" in out
    [row] = [line.split() for line in out.splitlines() if line.startswith(name)]
    assert row[1] == "waiting"
    doc = ok_json(weft("describe", holder, "--json", address=address))
    assert [(lk["lock_name"], lk["state"]) for lk in doc["locks"]] == [(name, "held")]

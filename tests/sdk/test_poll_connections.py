"""How a worker's poll connections are shared out over the processes of a port
(`sdk.poll_connections`), with stand-in clients that land where they are told;
against a real `weft server --workers 2` in tests/durability/test_server_workers.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest

from sdk.client import AsyncClient
from sdk.lanes import Placement
from sdk.poll_connections import TRIES, _Shares, spread_connections


@pytest.mark.parametrize(
    ("wanted", "processes", "landings", "held"),
    [
        (4, 2, "aaabbb", {"a": 2, "b": 2}),
        # Three processes: 2, 1 and 1, never 2, 2 and 0.
        (4, 3, "aabbbc", {"a": 2, "b": 1, "c": 1}),
        (4, 3, "ababc", {"a": 2, "b": 1, "c": 1}),
        # More processes than connections: one in each of as many.
        (4, 8, "aabcdde", {"a": 1, "b": 1, "c": 1, "d": 1}),
        (2, 2, "aab", {"a": 1, "b": 1}),
    ],
)
def test_shares_differ_by_one_at_most(
    wanted: int, processes: int, landings: str, held: dict[str, int]
) -> None:
    shares = _Shares(wanted, processes)
    kept: dict[str, int] = {}
    for node in landings:
        if sum(kept.values()) < wanted and shares.take(node):
            kept[node] = kept.get(node, 0) + 1
    assert kept == held


class Landing:
    """A client whose connections land where `landings` says (None: says nothing)."""

    def __init__(
        self, landings: Iterator[str | None], dialled: list[Landing], processes: int = 2
    ) -> None:
        self._landings = landings
        self._dialled = dialled
        self._processes = processes
        self.node = next(landings)
        self.closed = False

    def fork(self) -> Landing:
        twin = Landing(self._landings, self._dialled, self._processes)
        self._dialled.append(twin)
        return twin

    async def placement(self) -> Placement | None:
        return None if self.node is None else Placement(self.node, self._processes)

    async def close(self) -> None:
        self.closed = True


async def spread(
    landings: list[str | None], wanted: int = 4, processes: int = 2, up_to: int = 0
) -> tuple[list[Landing], list[Landing]]:
    dialled: list[Landing] = []
    # (The first landing is the client's own.)
    client = Landing(iter(landings), dialled, processes)
    into: list[AsyncClient] = []
    await spread_connections(cast(AsyncClient, client), wanted, into, up_to=up_to)
    return cast(list[Landing], into), dialled


async def test_connections_dialled_again_in_place_of_those_where_a_share_was_full() -> None:
    kept, dialled = await spread(["a", "a", "a", "a", "b", "a", "b"])
    # In turn by process, so that each task list's polls wait in both.
    assert [c.node for c in kept] == ["a", "b", "a", "b"]
    assert len(dialled) == 6 and not any(c.closed for c in kept)
    assert all(c.closed for c in dialled if c not in kept)


async def test_against_more_processes_than_wanted_one_connection_goes_to_each() -> None:
    """Six processes, four connections wanted, up to eight: six, one in each."""
    kept, _ = await spread(list("aabcdeaf"), processes=6, up_to=8)
    assert sorted(c.node for c in kept) == list("abcdef")
    # Up to four only, or more processes than `up_to`: four, or `up_to`.
    kept, _ = await spread(list("aabcdeaf"), processes=6)
    assert len(kept) == 4 and len({c.node for c in kept}) == 4
    kept, _ = await spread(list("aabcdeaf"), processes=6, up_to=5)
    assert len(kept) == 5 and len({c.node for c in kept}) == 5


async def test_connections_that_say_nothing_are_taken_as_they_are() -> None:
    kept, dialled = await spread(["a", None, None, None, None])
    assert len(kept) == 4 and len(dialled) == 4


async def test_when_the_tries_run_out_the_connections_stay_as_they_landed() -> None:
    kept, dialled = await spread(["a"] * (1 + TRIES * 4))
    assert len(kept) == 4 and len(dialled) == TRIES * 4
    assert sum(c.closed for c in dialled) == len(dialled) - 4


async def test_for_one_connection_nothing_is_asked() -> None:
    # (Against one process, nothing more is dialled: tests/e2e/test_lanes.py.)
    kept, dialled = await spread(["a", "b"], wanted=1)
    assert len(kept) == 1 and dialled == kept and kept[0].node == "b"  # (as it landed)

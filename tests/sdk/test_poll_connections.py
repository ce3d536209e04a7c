"""How a worker's poll connections are shared out over the processes of a port
(`sdk.poll_connections`; against a real `weft server --workers 2` in
tests/durability/test_server_workers.py)."""

from __future__ import annotations

import pytest

from sdk.poll_connections import _Shares


@pytest.mark.parametrize(
    ("wanted", "processes", "landings", "held"),
    [
        (4, 2, "aaabbb", {"a": 2, "b": 2}),
        # Three processes: 2, 1 and 1, never 2, 2 and 0.
        (4, 3, "aabbbc", {"a": 2, "b": 1, "c": 1}),
        (4, 3, "abab" + "c", {"a": 2, "b": 1, "c": 1}),
        # More processes than connections: one in each of as many.
        (4, 8, "aabcdde", {"a": 1, "b": 1, "c": 1, "d": 1}),
        (1, 2, "ab", {"a": 1}),
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

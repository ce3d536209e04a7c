"""A count of holders per key, kept only while a key has one: the polls a
principal has waiting, the followers of a history, the transitions waiting for
a run's turn. One rule for all three: a key leaves the map when its last
holder does, so a map of keys seen once does not grow without bound."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


@contextmanager
def holding(counts: dict[K, int], key: K) -> Iterator[None]:
    """`key` counted as held while inside; gone from `counts` when the last leaves."""
    counts[key] = counts.get(key, 0) + 1
    try:
        yield
    finally:
        left = counts[key] - 1
        if left:
            counts[key] = left
        else:
            del counts[key]

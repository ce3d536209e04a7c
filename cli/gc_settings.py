"""The garbage collector's settings for Weft's long-running processes."""

from __future__ import annotations

import gc

# A call allocates thousands of short-lived objects and almost none of them form
# cycles. At CPython's default (a young collection every 700 allocations net of
# frees) the server ran several collections per call, about 3 % of its CPU under
# the bench (py-spy). Every 50,000 it runs one every few dozen calls; a cycle
# that does form lives a little longer before it is freed.
YOUNG_COLLECTION_EVERY = 50_000


def tune_collector() -> None:
    """Collect, move what the process holds by now (modules, protobuf descriptors,
    a server's caches) where later collections no longer walk it, and collect
    the young generation less often. The server calls it once it has started, a
    worker before it loads its modules."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, older, oldest)

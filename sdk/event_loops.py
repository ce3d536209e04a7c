"""Which event loop a Weft process runs on: `weft server`, `weft decider` and
`weft runner` (`--event-loop`), and `Worker.run()`.

With direct lanes (`sdk.direct_lanes`) a worker's task calls travel on asyncio's
own transports, and the loop's work per call (its wake-ups, callbacks and socket
writes) is a part of each process's CPU. uvloop runs that loop and its
transports in C: in alternating pairs of `bench.hotpath` it took a median of
about 5 % off the server's CPU per activity, and 10-25 % off the runner's
(bench/README.md, "uvloop, again").

`weft server` runs on it by default (`auto`: uvloop where it imports, a
dependency of Weft but on Windows). Where the user's own code runs (`weft
runner`, `weft decider`, `weft server --embed`, `Worker.run()`) the default is
asyncio's loop, because uvloop starts a subprocess differently: it does not
close the child's other descriptors (`close_fds`), so a command that leaves a
job in the background with its output elsewhere (`svc >/dev/null 2>&1 &`)
holds the pipes its caller reads until that job ends, and it forks with
libuv's fork(), where gRPC's fork handlers crash the child unless gRPC was
imported with `GRPC_ENABLE_FORK_SUPPORT=0` (which the `weft` command sets).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

EVENT_LOOPS = ("auto", "uvloop", "asyncio")
EVENT_LOOP_ENV = "WEFT_EVENT_LOOP"

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def chosen(event_loop: str | None = None) -> str:
    """`event_loop`, else `WEFT_EVENT_LOOP`, else "asyncio"; ValueError for a
    name not in `EVENT_LOOPS`."""
    choice = event_loop if event_loop is not None else os.environ.get(EVENT_LOOP_ENV) or "asyncio"
    if choice not in EVENT_LOOPS:
        source = "event_loop" if event_loop is not None else EVENT_LOOP_ENV
        raise ValueError(f"{source} must be one of {', '.join(EVENT_LOOPS)}, not {choice!r}")
    return choice


def loop_factory(event_loop: str | None = None) -> LoopFactory | None:
    """What makes the chosen loop (None: asyncio's default). ValueError for an
    unknown name, or for "uvloop" where it is not installed."""
    choice = chosen(event_loop)
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ValueError(
                "the uvloop event loop is not installed (pip install uvloop),"
                " or choose the asyncio one"
            ) from None
        return None
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def running() -> str:
    """ "uvloop" or "asyncio": the loop this runs on (what the processes log)."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"

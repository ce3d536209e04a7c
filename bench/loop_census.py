"""`bench.hotpath --census`: what one Weft process's event loop does per activity.

A profile says where CPU went; it cannot say how often the loop woke, what woke
it, or how many callbacks and tasks each activity made. Those counts decide a
large part of an asyncio server's cost (each wake-up is a trip through the
kernel; each callback and task is Python the loop runs), and, unlike CPU
times, they do not drift with the machine: a change that adds a task per
activity shows as +1.00 in every run.

`python -m bench.loop_census DIR weft ARGS…` runs the `weft` command with the
loop instrumented. SIGUSR1 starts the count afresh (the timed batch begins) and
SIGUSR2 writes it to `DIR/census.<pid>.json`. The instrumentation itself costs
CPU: take times from runs without it.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import asyncio.events
import collections
import json
import os
import selectors
import signal
import sys
from collections.abc import Coroutine, Generator
from pathlib import Path
from typing import Any


class Census:
    """The loop's work, counted: what `install` patches in reports here."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.selects = 0
        """Trips through the selector: one per loop iteration."""
        self.waits = 0
        """Of those, the ones with nothing left to run, which may wait in the kernel
        (a timeout other than 0): the loop went idle and something woke it."""
        self.woken_by: collections.Counter[str] = collections.Counter()
        """Ready file descriptors, by the callback registered for them."""
        self.callbacks: collections.Counter[str] = collections.Counter()
        """Callbacks the loop ran (`call_soon`, timers, readers), by name."""
        self.tasks: collections.Counter[str] = collections.Counter()
        """Tasks created, by their coroutine."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "selects": self.selects,
            "waits": self.waits,
            "woken_by": dict(self.woken_by),
            "callbacks": dict(self.callbacks),
            "tasks": dict(self.tasks),
        }


def name_of(fn: object) -> str:
    """A callback's or coroutine's name as a reader would look for it: its
    qualified name, through `functools.partial` and bound methods."""
    inner = getattr(fn, "func", fn)  # (functools.partial)
    name = getattr(inner, "__qualname__", None)
    return str(name) if name else type(inner).__name__


def install(directory: Path) -> Census:
    """Count this process's loop work from now on; SIGUSR1 resets the count and
    SIGUSR2 writes it to `directory/census.<pid>.json` (whole, or not at all)."""
    counted = Census()
    _patch_selector(counted)
    _patch_handles(counted)
    _patch_tasks(counted)
    signal.signal(signal.SIGUSR1, lambda *_: counted.reset())
    signal.signal(signal.SIGUSR2, lambda *_: _write_or_say(counted, directory))
    return counted


def _write_or_say(census: Census, directory: Path) -> None:
    # (A signal handler's error is raised wherever the process was, its event
    # loop likely: the process measured must not die of its census.)
    try:
        write(census, directory)
    except Exception as exc:  # (a full disk, a directory gone, a JSON error)
        print(f"bench.loop_census: could not write the census: {exc}", file=sys.stderr)


def write(census: Census, directory: Path) -> Path:
    path = directory / f"census.{os.getpid()}.json"
    part = path.with_suffix(".part")
    part.write_text(json.dumps(census.as_dict()))
    part.replace(path)  # (the reader sees the whole file or none)
    return path


def _patch_selector(census: Census) -> None:
    cls = type(selectors.DefaultSelector())  # (the class asyncio's loop will use)
    select = cls.select

    def counted(self: selectors.DefaultSelector, timeout: float | None = None) -> Any:
        ready = select(self, timeout)
        census.selects += 1
        if timeout != 0:
            census.waits += 1
        for key, _ in ready:
            census.woken_by[_reader_name(key.data)] += 1
        return ready

    cls.select = counted  # type: ignore[method-assign]


def _reader_name(data: object) -> str:
    # asyncio registers (reader handle, writer handle) for each descriptor.
    handles = data if isinstance(data, tuple) else (data,)
    for handle in handles:
        if handle is not None:
            return name_of(getattr(handle, "_callback", handle))
    return "?"


def _patch_handles(census: Census) -> None:
    run = asyncio.events.Handle._run

    def counted(self: asyncio.events.Handle) -> None:
        census.callbacks[name_of(self._callback)] += 1  # type: ignore[attr-defined]
        run(self)

    asyncio.events.Handle._run = counted  # type: ignore[method-assign]


def _patch_tasks(census: Census) -> None:
    create = asyncio.base_events.BaseEventLoop.create_task

    def counted(
        self: asyncio.base_events.BaseEventLoop,
        coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
        **kwargs: Any,
    ) -> asyncio.Task[Any]:
        census.tasks[name_of(coro)] += 1
        return create(self, coro, **kwargs)

    asyncio.base_events.BaseEventLoop.create_task = counted  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[1] != "weft":
        raise SystemExit("usage: python -m bench.loop_census DIR weft ARGS…")
    install(Path(args[0]))
    # What `install` patches is asyncio's own loop: the process must run on it.
    if any(arg.startswith("--event-loop") for arg in args[2:]):
        raise SystemExit("bench.loop_census: the process runs on asyncio's loop; no --event-loop")
    os.environ["WEFT_EVENT_LOOP"] = "asyncio"
    from cli import main as weft  # (after install: the loop is not made yet)

    weft(args[2:])


if __name__ == "__main__":
    main()

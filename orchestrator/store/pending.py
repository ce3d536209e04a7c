"""A write's outcome, seen to its end by its caller.

A client that goes away cancels its call; but the database finishes a call it
was sent. So the store waits for the write's end even then, settles what hangs
on it (a task handed over in it, the cached state) by what really happened, and
raises the caller's cancellation after that.

The writer settles a `Pending` itself, and that wakes the caller directly. A
write that runs in a task of its own (`drive`) is settled by the task's done
callback; one that waits for a group commit has no task, and its group settles
it. (The store used to run each write in a task awaited through
`asyncio.shield`: a task, its first step, and three callbacks besides the
write's own, where a write alone now takes a task, its first step and two
callbacks, and a write that waits for a group one callback: `bench.hotpath
--census`.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")


class Pending(Generic[T]):
    """The outcome of a write under way, for its one caller (`seen`). The
    writer ends it with a result or an error, or abandons it when the write
    itself was cut off (its task cancelled: the loop is closing). The first
    outcome stands; what comes after is dropped."""

    __slots__ = ("_abandoned", "_done", "_error", "_result", "_traceback", "_waiter", "task")

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._result: T | None = None
        self._error: BaseException | None = None
        self._traceback: TracebackType | None = None
        self._abandoned = False
        self.task: asyncio.Task[T] | None = None
        """The task that runs the write, if one does (held here: the loop's
        own reference to a task is weak)."""

    def end(self, result: T) -> None:
        if not self._done:
            self._done, self._result = True, result
            self._wake()

    def fail(self, error: BaseException) -> None:
        if not self._done:
            # (One error may fail a whole group's writes: each caller raises it
            # from the traceback it came with, as a future's result does.)
            self._done, self._error, self._traceback = True, error, error.__traceback__
            self._wake()

    def abandon(self) -> None:
        if not self._done:
            self._done, self._abandoned = True, True
            self._wake()

    def take(self, task: asyncio.Task[T]) -> None:
        """Settle with how `task` ended: its done callback. (A task cancelled
        before its first step ran none of its code: only this settles it.)"""
        if task.cancelled():
            self.abandon()
        elif (error := task.exception()) is not None:
            self.fail(error)
        else:
            self.end(task.result())

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def seen(self) -> tuple[T, bool]:
        """(the write's result, whether the caller was cancelled meanwhile).
        The write's error is raised; CancelledError if the write was abandoned."""
        cancelled = False
        while not self._done:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            except asyncio.CancelledError:
                cancelled = True  # (wait on: the write goes on to its end)
        self._waiter = None
        if self._abandoned:
            raise asyncio.CancelledError
        if self._error is not None:
            raise self._error.with_traceback(self._traceback)
        return cast(T, self._result), cancelled


def drive(write: Coroutine[Any, Any, T]) -> Pending[T]:
    """Run `write` in a task of its own, which its caller's cancellation does
    not reach, and settle the `Pending` returned with how it ended."""
    pending: Pending[T] = Pending()
    pending.task = asyncio.ensure_future(write)
    pending.task.add_done_callback(pending.take)
    return pending

"""A write's outcome, seen to its end by its caller.

A client that goes away cancels its call; but the database finishes a call it
was sent. So the store waits for the write's end even then, settles what hangs
on it (a task handed over in it, the cached state) by what really happened, and
raises the caller's cancellation after that.

The writer settles a `Pending` itself, and that wakes the caller directly: no
task or `asyncio.shield` stands between them. On the hot path that was two
loop callbacks per write, four for a write that waited for a group commit, and
a task of its own for the latter (`bench.hotpath --census`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")


class Pending(Generic[T]):
    """The outcome of a write under way. The writer ends it with a result or
    an error, or abandons it when the write itself was cut off (the loop is
    closing); its caller waits with `seen`."""

    __slots__ = ("_abandoned", "_done", "_error", "_result", "_waiter", "task")

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._result: T | None = None
        self._error: BaseException | None = None
        self._abandoned = False
        self.task: asyncio.Task[None] | None = None
        """The task that drives the write, if one does (held: the loop's own
        reference to a task is weak)."""

    @property
    def done(self) -> bool:
        return self._done

    def end(self, result: T) -> None:
        if not self._done:
            self._done, self._result = True, result
            self._wake()

    def fail(self, error: BaseException) -> None:
        if not self._done:
            self._done, self._error = True, error
            self._wake()

    def abandon(self) -> None:
        """The write was cancelled itself, not only its caller: the caller's
        `seen` raises CancelledError."""
        if not self._done:
            self._done, self._abandoned = True, True
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def seen(self) -> tuple[T, bool]:
        """(the write's result, whether the caller was cancelled meanwhile).
        The write's error is raised as it came; CancelledError if abandoned."""
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
            raise self._error
        return cast(T, self._result), cancelled


def drive(write: Coroutine[Any, Any, T]) -> Pending[T]:
    """Run `write` in a task of its own, which its caller's cancellation does
    not reach, and settle its outcome on the `Pending` returned."""
    pending: Pending[T] = Pending()
    pending.task = asyncio.ensure_future(settle(pending, write))
    return pending


async def settle(pending: Pending[T], write: Coroutine[Any, Any, T]) -> None:
    """Await `write` and settle `pending` with what it came to."""
    try:
        pending.end(await write)
    except asyncio.CancelledError:
        pending.abandon()
        raise
    except BaseException as exc:
        pending.fail(exc)
        if not isinstance(exc, Exception):
            raise

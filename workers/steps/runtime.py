"""A tiny deterministic event loop for the step interpreter.

The interpreter is written as ordinary `async` functions, but it never runs on
asyncio: a decision is computed by replaying the history, and asyncio's loop
would bring clocks and its own scheduling order. Here a coroutine suspends only
on a `Future` that the history resolves (an activity result, a timer, a
signal), and `Scheduler.run` resumes ready coroutines strictly in the order
they became ready. The same history therefore always drives the coroutines
through the same steps and yields the same decisions.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any


class Cancelled(BaseException):
    """Thrown into a coroutine whose work was abandoned (a step timeout won the
    race, a sibling failed, the workflow was cancelled). A `BaseException` so that
    step error handling, which catches `Exception`, never swallows it."""


class Future:
    """A value the history will deliver, or that a coroutine will return."""

    def __init__(self, on_cancel: Callable[[], None] | None = None) -> None:
        self.done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._on_cancel = on_cancel

    def set_result(self, value: Any) -> None:
        if not self.done:
            self.done, self._value = True, value
            self._fire()

    def set_error(self, error: BaseException) -> None:
        if not self.done:
            self.done, self._error = True, error
            self._fire()

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """What abandoning it does from now on (a lock request changing hands)."""
        self._on_cancel = hook

    def cancel(self) -> None:
        """Abandon the operation: its hook records the cancel decision."""
        if not self.done:
            if self._on_cancel is not None:
                self._on_cancel()
            self.set_error(Cancelled())

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value

    @property
    def error(self) -> BaseException | None:
        return self._error

    def add_callback(self, callback: Callable[[], None]) -> None:
        if self.done:
            callback()
        else:
            self._callbacks.append(callback)

    def _fire(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def __await__(self) -> Generator[Future, None, Any]:
        if not self.done:
            yield self
        return self.result()


class Task:
    """A coroutine being driven by the scheduler; `future` holds its outcome."""

    def __init__(self, scheduler: Scheduler, coro: Coroutine[Any, Any, Any]) -> None:
        self.scheduler = scheduler
        self.coro = coro
        self.future = Future()
        self.waiting: Future | None = None
        self._throw: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.future.done

    def cancel(self) -> None:
        """Stop the coroutine at its current await; what it waited on is
        cancelled, so an activity or a timer gets its cancel decision."""
        if self.done:
            return
        if self.waiting is not None:
            waiting, self.waiting = self.waiting, None
            self._throw = Cancelled()
            waiting.cancel()
            self.scheduler.ready.append(self)
        else:
            # Not started yet, or queued to resume: it is thrown in when it runs.
            self._throw = Cancelled()

    def step(self) -> None:
        if self.done:
            return
        waiting, self.waiting = self.waiting, None
        try:
            if self._throw is not None:
                error, self._throw = self._throw, None
                yielded = self.coro.throw(error)
            elif waiting is not None and waiting.error is not None:
                yielded = self.coro.throw(waiting.error)
            else:
                yielded = self.coro.send(waiting.result() if waiting is not None else None)
        except StopIteration as stop:
            self.future.set_result(stop.value)
            return
        except BaseException as exc:  # the outcome of the coroutine, handed to its awaiter
            self.future.set_error(exc)
            return
        if not isinstance(yielded, Future):
            self.coro.close()
            self.future.set_error(TypeError(f"step coroutine awaited {yielded!r}"))
            return
        self.waiting = yielded
        yielded.add_callback(lambda: self._wake(yielded))

    def _wake(self, future: Future) -> None:
        if self.waiting is future:
            self.scheduler.ready.append(self)


class Scheduler:
    """Runs ready tasks in FIFO order until every task waits on the history."""

    def __init__(self) -> None:
        self.ready: deque[Task] = deque()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> Task:
        task = Task(self, coro)
        self.ready.append(task)
        return task

    def run(self) -> None:
        while self.ready:
            self.ready.popleft().step()


def first_of(*futures: Future) -> Future:
    """A future that completes with whichever of `futures` completes first (the
    winner itself, not its value)."""
    combined = Future()
    for future in futures:
        future.add_callback(lambda f=future: combined.set_result(f))  # type: ignore[misc]
    return combined

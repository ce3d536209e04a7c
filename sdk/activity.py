"""`@activity`: mark a function as an activity, and reach the running task from inside it.

    @activity
    def resize(image: dict) -> dict: ...

    @activity(name="charge-card", task_list="pci", start_to_close=timedelta(seconds=30))
    async def charge(card: Card) -> dict:
        activity.heartbeat({"step": "authorised"})

An activity takes its input as its one argument (rebuilt as the parameter's
annotated type: a dataclass, a pydantic model, a datetime …). A function with
several parameters takes a JSON object of them by name, or a list in order; one
with none ignores its input. Sync functions run in the worker's thread pool,
async ones on its event loop.
"""

from __future__ import annotations

import contextvars
import inspect
import threading
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, overload

from sdk.converter import PayloadConverter
from sdk.errors import WeftError


@dataclass(frozen=True)
class ActivityDefinition:
    """An `@activity` function with its name and defaults; still callable as itself."""

    fn: Callable[..., Any]
    name: str
    version: str = ""
    task_list: str = ""
    schedule_to_start: timedelta | None = None
    start_to_close: timedelta | None = None
    schedule_to_close: timedelta | None = None
    heartbeat: timedelta | None = None
    is_async: bool = False
    _params: tuple[tuple[str, Any], ...] = field(default=(), repr=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def arguments(
        self, value: Any, converter: PayloadConverter
    ) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments, from the activity's decoded input."""
        params = self._params
        if not params:
            return [], {}
        if len(params) == 1:
            return [converter.from_json(value, params[0][1])], {}
        hints = dict(params)
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(hints))
            if unknown:
                raise TypeError(f"{self.name}() got unexpected input fields: {', '.join(unknown)}")
            return [], {k: converter.from_json(v, hints[k]) for k, v in value.items()}
        if isinstance(value, list):
            if len(value) > len(params):
                raise TypeError(f"{self.name}() takes {len(params)} arguments, not {len(value)}")
            return [converter.from_json(v, params[i][1]) for i, v in enumerate(value)], {}
        raise TypeError(
            f"{self.name}() takes {len(params)} arguments: give its input as an object or a list"
        )


@dataclass(frozen=True)
class ActivityInfo:
    """About the running activity task (`activity.info()`)."""

    namespace: str
    workflow_id: str
    run_id: str
    activity_id: str
    activity_type: str
    task_list: str
    attempt: int
    scheduled_event_id: int
    started_event_id: int
    scheduled_time: datetime | None
    started_time: datetime | None
    start_to_close: timedelta | None
    heartbeat: timedelta | None
    task_token: bytes = field(repr=False, default=b"")


class ActivityContext:
    """What `activity.heartbeat()` and friends reach; one per running task.

    `send` is called with the latest heartbeat details, from any thread; the
    worker sends them (throttled) and calls `cancel()` when the answer says the
    decider asked for cancellation.
    """

    def __init__(self, info: ActivityInfo, send: Callable[[Any], None]) -> None:
        self.info = info
        self._send = send
        self._cancelled = threading.Event()

    def heartbeat(self, details: Any = None) -> None:
        self._send(details)

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled.is_set()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block a sync activity until cancelled (True) or the timeout passes (False)."""
        return self._cancelled.wait(timeout)


_current: contextvars.ContextVar[ActivityContext] = contextvars.ContextVar("weft_activity")


class _Activity:
    """The `activity` object: a decorator, and the door to the running task."""

    @overload
    def __call__(self, fn: Callable[..., Any], /) -> ActivityDefinition: ...

    @overload
    def __call__(
        self,
        *,
        name: str | None = None,
        version: str = "",
        task_list: str = "",
        schedule_to_start: timedelta | None = None,
        start_to_close: timedelta | None = None,
        schedule_to_close: timedelta | None = None,
        heartbeat: timedelta | None = None,
    ) -> Callable[[Callable[..., Any]], ActivityDefinition]: ...

    def __call__(  # type: ignore[misc]  # mypy misreads the positional-only `fn`
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        version: str = "",
        task_list: str = "",
        schedule_to_start: timedelta | None = None,
        start_to_close: timedelta | None = None,
        schedule_to_close: timedelta | None = None,
        heartbeat: timedelta | None = None,
    ) -> ActivityDefinition | Callable[[Callable[..., Any]], ActivityDefinition]:
        def wrap(func: Callable[..., Any]) -> ActivityDefinition:
            if isinstance(func, ActivityDefinition):
                raise TypeError(f"{func.name} is already an activity")
            if not callable(func):
                raise TypeError("@activity decorates a function")
            return ActivityDefinition(
                fn=func,
                name=name or func.__name__,
                version=version,
                task_list=task_list,
                schedule_to_start=schedule_to_start,
                start_to_close=start_to_close,
                schedule_to_close=schedule_to_close,
                heartbeat=heartbeat,
                is_async=inspect.iscoroutinefunction(func),
                _params=_parameters(func),
            )

        return wrap(fn) if fn is not None else wrap

    # -- inside a running activity ------------------------------------------------------

    def heartbeat(self, details: Any = None) -> None:
        """Tell the server the activity is alive (resets its heartbeat timeout).

        Sent at most every few seconds; the latest details win. The answer carries
        cancellation: async activities then get `asyncio.CancelledError` at their
        next `await`, sync ones see `activity.is_cancelled()` turn True.
        """
        self.context().heartbeat(details)

    def info(self) -> ActivityInfo:
        """The running activity task's ids, attempt and timeouts."""
        return self.context().info

    def is_cancelled(self) -> bool:
        """Whether the decider asked to cancel this activity (learned on a heartbeat)."""
        return self.context().is_cancelled

    def context(self) -> ActivityContext:
        try:
            return _current.get()
        except LookupError:
            raise WeftError("not inside a running activity") from None


activity = _Activity()


def set_context(ctx: ActivityContext) -> contextvars.Token[ActivityContext]:
    return _current.set(ctx)


def reset_context(token: contextvars.Token[ActivityContext]) -> None:
    _current.reset(token)


def _parameters(func: Callable[..., Any]) -> tuple[tuple[str, Any], ...]:
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # unresolvable forward references: take values as they come
        hints = {}
    params = inspect.signature(func).parameters.values()
    return tuple(
        (p.name, hints.get(p.name, Any))
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )

"""What both built-in activities share: their version, their errors, input
checking, and heartbeats while they work."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from sdk.activity import activity
from sdk.errors import ActivityFailure, NonRetryableError, WeftError

T = TypeVar("T")
A = TypeVar("A")
VERSION = "1"


# How often a running built-in heartbeats: the answers are how the runner hears
# that the step was cancelled (the SDK throttles what it actually sends).
BEAT_EVERY = 1.0


# How much of a response or of a command's output a failure's details keep: the
# details are a payload too, and one over the limit would lose the failure.
DETAIL_CHARS = 8 * 1024


class InvalidInput(NonRetryableError):
    """The built-in activity's input is malformed: the same input fails again."""

    # The name a failure's details show (`module.Class`), as before the package split.
    __module__ = "workers.builtins"


class HttpStatusError(ActivityFailure):
    """The server answered with a status code the step did not expect."""

    # The name a failure's details show (`module.Class`), as before the package split.
    __module__ = "workers.builtins"


class HttpRequestError(ActivityFailure):
    """The request got no answer (refused, unknown host, timed out, …); may be retried."""

    # The name a failure's details show (`module.Class`), as before the package split.
    __module__ = "workers.builtins"


class ShellExitError(ActivityFailure):
    """The command exited with a code the step did not expect."""

    # The name a failure's details show (`module.Class`), as before the package split.
    __module__ = "workers.builtins"


class HttpNotAllowed(NonRetryableError):
    """This runner may not make this request: see `weft runner --allow-http`."""

    # The name a failure's details show (`module.Class`), as before the package split.
    __module__ = "workers.builtins"


class ShellNotAllowed(NonRetryableError):
    """This runner does not run shell commands: start it with `weft runner --allow-shell`."""

    # The name a failure's details show (`module.Class`), as before the package split.
    __module__ = "workers.builtins"


# -- input checking ----------------------------------------------------------------------


def _fields(request: Any, activity_type: str, known: Mapping[str, Any]) -> dict[str, Any]:
    """The input as a dict with defaults filled in; unknown keys are refused, so a
    misspelt option (`status-code`) is not silently ignored."""
    if not isinstance(request, dict):
        raise InvalidInput(f"{activity_type} takes an object as input, not {_kind(request)}")
    unknown = sorted(set(request) - set(known))
    if unknown:
        raise InvalidInput(
            f"{activity_type}: unknown input {', '.join(map(repr, unknown))}"
            f" (known: {', '.join(known)})"
        )
    return {**known, **{k: v for k, v in request.items() if v is not None}}


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _expected(value: Any, what: str) -> frozenset[int] | None:
    """An expected code: a number, a list of numbers, or "any" (None: any code)."""
    if isinstance(value, str) and value.strip().lower() == "any":
        return None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        raise InvalidInput(f'{what} must be a number, a list of numbers or "any", not {value!r}')
    return frozenset(items)


def _describe(codes: frozenset[int] | None) -> str:
    if codes is None:
        return "any"
    return " or ".join(str(c) for c in sorted(codes))


def _strings(value: Any, what: str) -> dict[str, str]:
    """Headers or environment variables: names to text (numbers and booleans as JSON)."""
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} must be an object of names to values, not {_kind(value)}")
    out: dict[str, str] = {}
    for name, item in value.items():
        if isinstance(item, bool):
            out[str(name)] = "true" if item else "false"
        elif isinstance(item, str | int | float):
            out[str(name)] = str(item)
        else:
            raise InvalidInput(f"{what}: {name!r} must be text or a number, not {_kind(item)}")
    return out


def _clip(text: str) -> str:
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS] + "… (truncated)"


# -- heartbeats and cancellation ---------------------------------------------------------


def _beat() -> None:
    # Called directly, outside a runner (a test, a script): nobody to tell.
    with contextlib.suppress(WeftError):
        activity.heartbeat()


async def _beating(work: Awaitable[T]) -> T:
    """Await `work`, heartbeating meanwhile. Cancelling this (the step was
    cancelled, or its start-to-close passed) cancels `work` too."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            _beat()
            done, _ = await asyncio.wait({task}, timeout=BEAT_EVERY)
            if done:
                return task.result()
    finally:
        task.cancel()


async def _in_thread(fn: Callable[[A], T], arg: A) -> T:
    """`fn(arg)` in a daemon thread of its own, so a blocking call keeps the
    runner's loop free. Not the loop's default executor: `asyncio.run` would wait
    for a call still running there before the runner could exit. Cancelled, the
    call finishes by itself and its outcome is dropped."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(apply: Callable[[Any], None], value: Any) -> None:
        def on_loop() -> None:
            if not future.done():  # not cancelled meanwhile
                apply(value)

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(on_loop)

    def target() -> None:
        try:
            result = fn(arg)
        except BaseException as exc:
            settle(future.set_exception, exc)
        else:
            settle(future.set_result, result)

    threading.Thread(target=target, name="weft-builtin", daemon=True).start()
    return await future

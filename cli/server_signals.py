"""`weft server`'s signals, handled by the process rather than by its event loop.

The loop's own handlers (`loop.add_signal_handler`) go with the loop: a signal
in the moment after it closes would end a cleanly drained server with the
signal's status. These hand each signal to the loop while `_serve` runs and do
nothing after it; `install` returns what puts the previous handlers back (a
caller that is not the process's whole life, a test, calls it)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any

STOPS = (signal.SIGTERM, signal.SIGINT)


def install(
    loop: asyncio.AbstractEventLoop,
    on_stop: Callable[[int], None],
    on_reload: Callable[[], None] | None,
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Handlers for SIGTERM and SIGINT (`on_stop(signum)`) and, with
    `on_reload` (TLS), SIGHUP; returns (`finish`: from now on they do nothing,
    `restore`: the previous handlers back)."""
    serving = True

    def hand_over(handler: Callable[..., None], *args: Any) -> None:
        if serving and not loop.is_closed():
            loop.call_soon_threadsafe(run, handler, *args)

    def run(handler: Callable[..., None], *args: Any) -> None:
        if serving:  # (not one queued before `finish`, run in the loop's last turns)
            handler(*args)

    handled = list(STOPS) + ([signal.SIGHUP] if on_reload is not None else [])
    previous = {sig: signal.getsignal(sig) for sig in handled}
    for sig in STOPS:
        signal.signal(sig, lambda signum, _frame: hand_over(on_stop, signum))
    if on_reload is not None:  # without TLS, SIGHUP keeps its default (exit)
        signal.signal(signal.SIGHUP, lambda _signum, _frame: hand_over(on_reload))

    def finish() -> None:
        nonlocal serving
        serving = False

    def restore() -> None:
        finish()
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return finish, restore

"""Activities of the step-workflow end-to-end tests, run by a real `weft
runner` process. What the test must see from outside (attempts, the moment a
slow activity was cancelled) is written to files in the directory the
workflow passes in."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path

from sdk import activity


@activity
def double(request: dict[str, int]) -> dict[str, int]:
    """One parameter: it receives the step's whole `input` map."""
    return {"value": request["n"] * 2}


@activity
def flaky(key: str, failures: int, dir: str) -> dict[str, int]:
    """Fails `failures` times for `key`, then answers the attempt number; the
    count is kept in a file so it survives across runner processes."""
    counter = Path(dir) / f"{key}.attempts"
    attempt = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(attempt))
    if attempt <= failures:
        raise RuntimeError(f"attempt {attempt} of {key} fails")
    return {"attempt": attempt}


@activity
async def square(n: int, dir: str) -> int:
    """Records when it ran, so the test can see how many overlapped."""
    started = time.time()
    await asyncio.sleep(0.3)
    with (Path(dir) / "squares.log").open("a") as log:
        log.write(f"{n} {started} {time.time()}\n")
    return n * n


@activity(heartbeat=timedelta(seconds=10))
async def slow(seconds: float, dir: str) -> str:
    """Heartbeats while it sleeps, which is how it hears a cancel request;
    leaves a file saying it was cancelled."""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            activity.heartbeat()
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        (Path(dir) / "slow.cancelled").write_text("cancelled")
        raise
    return "finished"

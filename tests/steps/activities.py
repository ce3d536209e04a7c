"""Activities the step tests schedule (run by an in-process `ActivityWorker`)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from sdk import activity

# How often each flaky key has been tried, across the test session.
ATTEMPTS: Counter[str] = Counter()


@activity
def echo(value: Any = None) -> Any:
    """Answers its input (the step's whole `input` map)."""
    return value


@activity
def add(a: float, b: float) -> float:
    return a + b


@activity
def flaky(key: str, failures: int) -> dict[str, Any]:
    """Fails `failures` times for `key`, then succeeds with the attempt number."""
    ATTEMPTS[key] += 1
    if ATTEMPTS[key] <= failures:
        raise RuntimeError(f"flaky {key}: attempt {ATTEMPTS[key]} fails")
    return {"attempt": ATTEMPTS[key]}


@activity
async def slow(seconds: float, label: str = "") -> str:
    """Sleeps; cancelled by its step's timeout in the tests."""
    await asyncio.sleep(seconds)
    return "finished"


@activity
def explode(message: str = "boom", code: int = 0) -> None:
    raise ValueError(message)


ALL = [echo, add, flaky, slow, explode]

"""The counter of the `atomic-increment` step workflow
(`examples/steps/atomic-increment.yaml`), kept by two activities in a SQLite
file (`WEFT_COUNTERS`, default `counters.db` in the runner's directory), as
seed 000 keeps it in an entity sensor:

    weft decider --definitions examples/steps
    weft runner --task-list counters examples.counters
    for i in 1 2 3; do weft start atomic-increment --input '{"counter": "hits"}'; done

`write-counter` sets the value it is given (it does not add), then dawdles for
a moment (`WEFT_COUNTERS_LINGER` seconds, default 0.3), heartbeating: a runner
killed right then has written the value without reporting it, which is what the
workflow's lock and replay point are for.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from sdk import activity

TASK_LIST = "counters"


@contextmanager
def _db() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(os.environ.get("WEFT_COUNTERS", "counters.db"), timeout=30)
    try:
        with conn:  # one transaction
            conn.execute(
                "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER)"
            )
            yield conn
    finally:
        conn.close()


@activity(name="read-counter", task_list=TASK_LIST)
def read_counter(job: dict[str, Any]) -> int:
    with _db() as conn:
        query = "SELECT value FROM counters WHERE name = ?"
        row = conn.execute(query, (job["counter"],)).fetchone()
    return int(row[0]) if row else 0


@activity(name="write-counter", task_list=TASK_LIST, heartbeat=timedelta(seconds=1))
def write_counter(job: dict[str, Any]) -> int:
    value = int(job["value"])
    with _db() as conn:
        conn.execute(
            "INSERT INTO counters (name, value) VALUES (?, ?)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (job["counter"], value),
        )
    # Still at work after the write: a runner that dies now has changed the
    # counter without saying so. (A test learns from this file who is inside.)
    inflight = os.environ.get("WEFT_COUNTERS_INFLIGHT")
    if inflight:
        with open(inflight, "a") as out:
            out.write(f"{os.getpid()}\n")
    linger = float(os.environ.get("WEFT_COUNTERS_LINGER", "0.3"))
    for _ in range(int(linger / 0.05)):
        activity.heartbeat({"written": value})
        time.sleep(0.05)
    return value

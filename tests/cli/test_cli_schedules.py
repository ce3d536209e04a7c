"""`weft schedule …` against a real server: the happy path from create to
delete, and bad input as one line on stderr with its exit code, nothing made."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.cli.support import clean_env, error_line, eventually, ok, ok_json, run_all
from tests.helpers import unique
from tests.serverproc import WEFT


def sched(address: str, action: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WEFT), "schedule", action, "--address", address, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
    )


def test_schedule_happy_path(address: str, idle_task_list: str) -> None:
    name = unique("nightly")
    out = ok(
        sched(
            address,
            "create",
            name,
            "--workflow-type",
            "report",
            "--cron",
            "0 2 * * *",
            "--timezone",
            "Europe/Brussels",
            "--input",
            '{"day": "today"}',
            "--task-list",
            idle_task_list,
            "--overlap",
            "allow",
            "--catch-up-window",
            "1h",
            "--jitter",
            "30s",
            "--paused",
            "--note",
            "not yet",
        )
    )
    assert out.startswith(f"created schedule {name}; next ")
    listed = ok(sched(address, "list"))
    assert name in listed and "0 2 * * * (Europe/Brussels)" in listed and "paused" in listed

    doc = ok_json(sched(address, "describe", name, "--json", "--next", "3"))
    assert doc["paused"] and doc["note"] == "not yet"
    assert doc["input"] == {"day": "today"}
    assert doc["catch_up_window"] == 3600 and doc["jitter"] == 30 and doc["overlap"] == "allow"
    assert len(doc["next_times"]) == 3

    workflow_id = ok(sched(address, "trigger", name)).strip()
    assert workflow_id.startswith(f"{name}/")

    def started() -> dict[str, Any] | None:
        d = ok_json(sched(address, "describe", name, "--json"))
        return d if d["started"] == 1 else None

    doc = eventually(started)
    assert doc["recent_runs"][0]["workflow_id"] == workflow_id
    assert doc["recent_runs"][0]["status"] == "open"
    text = ok(sched(address, "describe", name))
    assert "started 1, skipped 0, missed 0" in text and workflow_id in text

    assert "backfilling 2 slots" in ok(
        sched(address, "backfill", name, "2026-01-01T00:00:00Z", "2026-01-02T12:00:00Z")
    )
    ok(sched(address, "update", name, "--every", "1h", "--overlap", "skip"))
    doc = ok_json(sched(address, "describe", name, "--json"))
    assert doc["every"] == 3600 and doc["cron"] == "" and doc["overlap"] == "skip"
    assert doc["input"] == {"day": "today"}  # untouched by the update
    ok(sched(address, "pause", name, "--note", "maintenance"))
    assert ok_json(sched(address, "describe", name, "--json"))["note"] == "maintenance"
    ok(sched(address, "unpause", name, "--note", "back"))
    assert not ok_json(sched(address, "describe", name, "--json"))["paused"]
    assert ok(sched(address, "delete", name)).strip() == f"deleted schedule {name}"
    error_line(sched(address, "describe", name), "schedule describe", 3)


BAD = {
    "no-type": (["x", "--cron", "* * * * *"], 2, "--workflow-type is required"),
    "neither": (["x", "--workflow-type", "t"], 2, "one of --cron and --every"),
    "both": (["x", "--workflow-type", "t", "--cron", "* * * * *", "--every", "1m"], 2, "one of"),
    "bad-cron": (["x", "--workflow-type", "t", "--cron", "0 25 * * *"], 2, "outside 0-23"),
    "bad-zone": (
        ["x", "--workflow-type", "t", "--cron", "0 2 * * *", "--timezone", "Moon/Base"],
        2,
        "unknown time zone",
    ),
    "bad-every": (["x", "--workflow-type", "t", "--every", "often"], 2, "invalid duration"),
    "bad-overlap": (["x", "--workflow-type", "t", "--every", "1m", "--overlap", "queue"], 2, ""),
    "bad-time": (["x", "--workflow-type", "t", "--every", "1m", "--start-at", "soon"], 2, "ISO"),
    "end-before-start": (
        [
            "x",
            "--workflow-type",
            "t",
            "--every",
            "1m",
            "--start-at",
            "2026-02-01",
            "--end-at",
            "2026-01-01",
        ],
        2,
        "end_at is before",
    ),
    "bad-input": (["x", "--workflow-type", "t", "--every", "1m", "--input", "{"], 2, "JSON"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_create_is_one_line(address: str, case: str) -> None:
    args, code, text = BAD[case]
    name = unique("bad")
    args = [name, *args[1:]]
    done = sched(address, "create", *args)
    line = error_line(done, "schedule create", code)
    assert text in line
    assert name not in ok(sched(address, "list"))


def test_other_bad_lines(address: str) -> None:
    missing = unique("missing")
    done = run_all(
        [
            [str(WEFT), "schedule", action, "--address", address, *args]
            for action, args in [
                ("pause", [missing]),
                ("trigger", [missing]),
                ("delete", [missing]),
                ("update", [missing, "--every", "1m"]),
                ("update", [missing]),
                ("backfill", [missing, "2026-01-02", "2026-01-01"]),
                ("backfill", [missing, "2026-01-01", "2026-01-02"]),
            ]
        ]
    )
    for result, (command, code) in zip(
        done,
        [
            ("schedule pause", 3),
            ("schedule trigger", 3),
            ("schedule delete", 3),
            ("schedule update", 3),
            ("schedule update", 2),
            ("schedule backfill", 2),
            ("schedule backfill", 3),
        ],
        strict=True,
    ):
        error_line(result, command, code)

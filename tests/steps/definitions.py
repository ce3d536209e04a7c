"""What the definition parser's tests share: small definitions built from
steps, shapes of step trees, refusals with their message, and the default
args of the step types."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from workers.steps.definition import DefinitionError, load_file, parse
from workers.steps.model import Definition, Step


def definition(steps: str, head: str = "name: wf\n") -> Definition:
    """A definition of `head` then `steps:` with the given (dedented) steps,
    which start on line `head lines + 2`."""
    body = textwrap.indent(textwrap.dedent(steps).strip("\n"), "  ")
    return parse(f"{head}steps:\n{body}\n")


def one(step: str) -> Step:
    """The only step of a definition (on line 3)."""
    steps = definition(step).steps
    assert len(steps) == 1
    return steps[0]


def item(step_map: str) -> str:
    """A step map as a YAML list item."""
    lines = textwrap.dedent(step_map).strip("\n").splitlines()
    return "\n".join(["- " + lines[0], *("  " + line for line in lines[1:])])


def shape(value: Any) -> Any:
    """Nested steps as (type, args) so whole trees compare in one assert."""
    if isinstance(value, Step):
        return (value.type, shape(value.args))
    if isinstance(value, tuple):
        return tuple(shape(v) for v in value)
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    return value


def refused(text: str | bytes, tmp_path: Path | None = None) -> str:
    with pytest.raises(DefinitionError) as caught:
        if isinstance(text, bytes):
            assert tmp_path is not None
            path = tmp_path / "bad.yaml"
            path.write_bytes(text)
            load_file(path)
        else:
            parse(text, "wf.yaml")
    return str(caught.value)


LOG_X = ("log", {"message": "x", "level": "info"})
NO_FAN_OUT = {"concurrency": 1, "reducing": None}
NESTED_DEFAULTS = {
    "target": None,
    "has_target": False,
    **NO_FAN_OUT,
    "lock": None,
    "replayable": None,
    "retention": None,
    "setting": None,
    "var": "target",
    "index_var": "target_index",
}
ACTIVITY_DEFAULTS = {
    "version": "",
    "task_list": None,
    "schedule_to_start": None,
    "start_to_close": None,
    "schedule_to_close": None,
    "heartbeat": None,
}
RETRY_DEFAULTS = {
    "replay": None,
    "from": None,
    "limit": (),
    "backoff": None,
    "timeout": None,
    "hash": None,
}

"""The parsed form of a step workflow: what `definition.py` builds from YAML and
what the interpreter runs.

Values inside a step (`args`, `input`, `condition`, `output`) stay as written:
strings keep their `${…}` and are resolved by the interpreter when the step
runs, so the same definition gives the same result on every replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from workers.steps.continuation import ContinueAfter

RESERVED_IDS = frozenset({"start", "end", "exit", "last", "default", "here"})

# The built-in activity types the runner offers (`http` always, `shell` only
# with `--allow-shell`).
HTTP_ACTIVITY = "weft.http"
SHELL_ACTIVITY = "weft.shell"

# The version a definition has when it names none. The rule's home is the
# server's engine (orchestrator/engine/start.py DEFAULT_VERSION), which the
# interpreter may not import; a test holds the two equal.
DEFAULT_VERSION = "1"
# The largest definition the server takes, in bytes: a copy of the engine's
# (orchestrator/engine/limits.py MAX_DEFINITION_BYTES; tests/test_rule_copies.py
# holds them equal). A file past it is refused before it is read whole.
MAX_DEFINITION_BYTES = 256 * 1024


@dataclass(frozen=True)
class Param:
    """A declared workflow parameter: merged into `input` at the start."""

    name: str
    type: str = ""  # "", string, integer, double, boolean, map, list, json, yaml
    default: Any = None
    has_default: bool = False
    required: bool = False


@dataclass(frozen=True)
class Step:
    """One step.

    `type` is the step type (`let`, `transform`, `log`, `sleep`, `wait`, `goto`,
    `label`, `no-op`, `return`, `fail`, `retry`, `if`, `switch`, `foreach`,
    `workflow`, `subworkflow`, `activity`, `http`, `shell`, `signal`, `child`).
    `args` holds the type's own fields, from the shorthand or the long form
    (see the table in `definition.py`); nested steps in `args` are `Step`s or
    tuples of them.
    """

    type: str
    line: int
    index: int
    args: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] = field(default_factory=dict)
    condition: Any = None
    output: Any = None
    has_output: bool = False
    next: str | None = None
    on_error: tuple[Step, ...] = ()
    timeout: timedelta | None = None
    idempotent: str = "default"  # yes | no | default
    replayable: str | None = None  # "from here" | "from here only" | "reset"

    @property
    def label(self) -> str:
        return self.id or f"step {self.index + 1}"


@dataclass(frozen=True)
class Definition:
    """A whole workflow definition."""

    name: str
    version: str
    steps: tuple[Step, ...]
    task_list: str = "default"
    description: str = ""
    parameters: tuple[Param, ...] = ()
    input: dict[str, Any] = field(default_factory=dict)
    output: Any = None
    has_output: bool = False
    on_error: tuple[Step, ...] = ()
    timeout: timedelta | None = None
    lock: Any = None
    replayable: str = "enabled"  # enabled | disabled | from start | automatically
    idempotent: str = ""  # "" or "all"
    retention: str | None = None
    decider_timeout: timedelta | None = None
    execution_timeout: timedelta | None = None
    continue_as_new_after: ContinueAfter | None = None
    """`continue-as-new-after`: when the run continues as new on its own."""
    source: str = ""  # the YAML text, snapshotted into WorkflowStarted
    path: str = ""

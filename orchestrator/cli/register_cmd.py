"""`weft register FILE.yaml …`: record workflow types and their defaults on the server.

A file names one workflow type: `name` (required), `version`, `task-list`,
`timeout` (execution), `decider-timeout`, `description`. The step language's
keys (`steps`, `input`, …) are accepted here and interpreted by the step
decider. Every file is checked before any is registered, so a bad file
registers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import click
import yaml

from orchestrator.cli.client import connect
from orchestrator.cli.errors import EXIT_USAGE, fail, reports_errors
from orchestrator.cli.params import server_options
from sdk.durations import parse_duration

_TYPE_KEYS = {"name", "version", "task-list", "timeout", "decider-timeout", "description"}
# Keys of the step language (STEPS.md), read by the step decider, not by registration.
_STEP_KEYS = {
    "steps",
    "input",
    "parameters",
    "output",
    "on-error",
    "lock",
    "retention",
    "replayable",
    "idempotent",
}


class DefinitionError(ValueError):
    """A definition file is malformed: its message is `FILE:LINE: reason`."""


@dataclass(frozen=True)
class WorkflowTypeFile:
    path: Path
    name: str
    version: str = ""
    task_list: str = ""
    timeout: timedelta | None = None
    decider_timeout: timedelta | None = None
    description: str = ""


def load(path: Path) -> WorkflowTypeFile:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DefinitionError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DefinitionError(f"{path}:{line}: not UTF-8 text") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise DefinitionError(f"{path}:{line}: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:  # the reader: characters YAML does not allow
        position = getattr(exc, "position", 0)
        line = text.count("\n", 0, position) + 1
        reason = getattr(exc, "reason", "") or "unreadable YAML"
        raise DefinitionError(f"{path}:{line}: {reason}") from None
    if not isinstance(root, yaml.MappingNode):
        line = root.start_mark.line + 1 if root is not None else 1
        raise DefinitionError(f"{path}:{line}: a workflow definition is a mapping (name: …)")
    values: dict[str, tuple[object, int]] = {}
    for key_node, value_node in root.value:
        key, line = str(key_node.value), key_node.start_mark.line + 1
        if key not in _TYPE_KEYS | _STEP_KEYS:
            known = ", ".join(sorted(_TYPE_KEYS | _STEP_KEYS))
            raise DefinitionError(f"{path}:{line}: unknown key {key!r} (known: {known})")
        if isinstance(value_node, yaml.ScalarNode):
            values[key] = (value_node.value, value_node.start_mark.line + 1)
        else:
            values[key] = (None, value_node.start_mark.line + 1)

    def text_of(key: str) -> str:
        value, line = values.get(key, ("", 0))
        if value is None:
            raise DefinitionError(f"{path}:{line}: {key} must be a plain value")
        return str(value)

    def span(key: str) -> timedelta | None:
        raw = text_of(key)
        if not raw:
            return None
        try:
            return parse_duration(raw)
        except ValueError as exc:
            raise DefinitionError(f"{path}:{values[key][1]}: {key}: {exc}") from None

    name = text_of("name").strip()
    if not name:
        raise DefinitionError(f"{path}:1: `name` is required")
    return WorkflowTypeFile(
        path=path,
        name=name,
        version=text_of("version"),
        task_list=text_of("task-list"),
        timeout=span("timeout"),
        decider_timeout=span("decider-timeout"),
        description=text_of("description"),
    )


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@server_options
@reports_errors
def register(files: tuple[Path, ...], address: str, namespace: str) -> None:
    """Register workflow types from definition files (type name + version)."""
    try:
        loaded = [load(path) for path in files]
    except DefinitionError as exc:
        fail("register", str(exc), EXIT_USAGE)
    with connect(address, namespace) as client:
        for item in loaded:
            client.register_workflow_type(
                item.name,
                version=item.version,
                default_task_list=item.task_list,
                default_execution_timeout=item.timeout,
                default_decider_timeout=item.decider_timeout,
                description=item.description,
            )
            version = f" version {item.version}" if item.version else ""
            click.echo(f"registered {item.name}{version} from {item.path}")

"""`weft register FILE.yaml …`: record step-workflow definitions on the server.

Each file is a whole step workflow (STEPS.md), read and checked by
`workers.steps.definition`. Its type is registered under `(name, version)`
with its defaults (`task_list`, `execution-timeout`, `decider-timeout`,
`description`) and its text, which `weft start` snapshots into the run.
`timeout` is the step language's workflow timeout, not the execution timeout.
Every file is checked before any is registered, so a bad file registers
nothing.
"""

from __future__ import annotations

from pathlib import Path

import click

from cli.client import connect
from cli.errors import EXIT_USAGE, fail, reports_errors
from cli.params import server_options
from orchestrator.engine.limits import MAX_DEFINITION_BYTES
from workers.steps.definition import DefinitionError, load_file


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@server_options
@reports_errors
def register(files: tuple[Path, ...], address: str, namespace: str) -> None:
    """Register step-workflow definitions (type name + version) from YAML files."""
    try:
        # (a file over the server's limit is refused here, before more of it is read)
        loaded = [load_file(path, MAX_DEFINITION_BYTES) for path in files]
    except DefinitionError as exc:
        fail("register", str(exc), EXIT_USAGE)
    with connect(address, namespace) as client:
        for definition in loaded:
            client.register_workflow_type(
                definition.name,
                version=definition.version,
                default_task_list=definition.task_list,
                default_execution_timeout=definition.execution_timeout,
                default_decider_timeout=definition.decider_timeout,
                description=definition.description,
                definition=definition.source,
            )
            click.echo(
                f"registered {definition.name} version {definition.version} from {definition.path}"
            )

"""The `weft` command line: one group, a module per family of commands.

Errors are one line on stderr with the exit codes of CONTRACT.md: 0 success,
1 the operation failed, 2 usage, 3 not found, 4 server unreachable. `--debug`
(before the command) shows the traceback instead.
"""

from __future__ import annotations

import os
import sys

# gRPC's C core logs its own copy of errors we report in one line; it reads this
# when grpc is first imported, which the commands below do.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import click

from orchestrator.cli import server_cmd, worker_cmds, workflow_cmds
from orchestrator.cli.errors import EXIT_USAGE, one_line


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="WEFT_DEBUG", help="show tracebacks on errors")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Weft: event-sourced workflow orchestration."""
    ctx.obj = {"debug": debug}


cli.add_command(server_cmd.server)
for command in (*workflow_cmds.COMMANDS, *worker_cmds.COMMANDS):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """The console script: run a command, turning usage errors into one line."""
    try:
        code = cli.main(args=argv, prog_name="weft", standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "weft"
        click.echo(f"{where}: {one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code if exc.exit_code else EXIT_USAGE)
    except click.ClickException as exc:
        click.echo(f"weft: {one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("weft: aborted", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)

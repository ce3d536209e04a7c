"""The `weft` command line: one group, a module per family of commands.

Errors are one line on stderr with the exit codes of CONTRACT.md: 0 success,
1 the operation failed, 2 usage, 3 not found, 4 server unreachable. `--debug`
(before the command) shows the traceback instead.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType

# gRPC's C core logs its own copy of errors we report in one line; it reads this
# when grpc is first imported, which the commands below do.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
# On uvloop (sdk/event_loops.py) a subprocess starts with libuv's fork(), where
# asyncio's own uses vfork: gRPC's fork handlers then run in the child, which
# died of SIGSEGV before its exec (a `weft.shell` task, an embedded activity's
# command). Weft's processes never fork without an exec: they need none of them.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")


def _interrupted_while_loading(signum: int, frame: FrameType | None) -> None:
    os.write(2, b"weft: interrupted\n")
    os._exit(130)


# A Ctrl-C while the commands load (most of a second) ends the process as one
# later does, in one line, not with the traceback of an import. Only where
# Python's own handler is in place (not ignored, as in a background job), and
# only for these imports: then the commands' own handling takes over.
_SIGINT = signal.getsignal(signal.SIGINT)
_QUIET = threading.current_thread() is threading.main_thread() and (
    _SIGINT is signal.default_int_handler
)
if _QUIET:
    signal.signal(signal.SIGINT, _interrupted_while_loading)
try:
    import click

    from cli import (
        auth_cmd,
        cluster_cmds,
        doctor_cmd,
        locks_cmd,
        replay_cmd,
        schedule_cmd,
        server_cmd,
        ui_cmd,
        worker_cmds,
        workflow_cmds,
    )
    from cli.errors import EXIT_USAGE, one_line
finally:
    if _QUIET:
        signal.signal(signal.SIGINT, _SIGINT)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="WEFT_DEBUG", help="show tracebacks on errors")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Weft: event-sourced workflow orchestration."""
    from orchestrator import logging as weft_logging

    ctx.obj = {"debug": debug}
    # Client commands print data on stdout; the SDK's logs (retries) stay on stderr
    # and quiet. The server and worker commands set their own level.
    weft_logging.configure("debug" if debug else "warning")


cli.add_command(server_cmd.server)
for command in (
    *workflow_cmds.COMMANDS,
    *replay_cmd.COMMANDS,
    *locks_cmd.COMMANDS,
    *worker_cmds.COMMANDS,
    *auth_cmd.COMMANDS,
    *cluster_cmds.COMMANDS,
    *doctor_cmd.COMMANDS,
    *schedule_cmd.COMMANDS,
    *ui_cmd.COMMANDS,
):
    cli.add_command(command)


def _command_path(argv: list[str] | None) -> str:
    """`weft COMMAND` from the arguments, for errors click raises without a context."""
    args = sys.argv[1:] if argv is None else argv
    name = next((a for a in args if a in cli.commands), None)
    return f"weft {name}" if name else "weft"


def main(argv: list[str] | None = None) -> None:
    """The console script: run a command, turning usage errors into one line."""
    try:
        code = cli.main(args=argv, prog_name="weft", standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else _command_path(argv)
        click.echo(f"{where}: {one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code if exc.exit_code else EXIT_USAGE)
    except click.ClickException as exc:
        click.echo(f"weft: {one_line(exc.format_message())}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("weft: aborted", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)

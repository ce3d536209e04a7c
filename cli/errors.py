"""Exit codes and one-line error reports for the client commands (CONTRACT.md)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from sdk.errors import (
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    WeftError,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4

F = TypeVar("F", bound=Callable[..., Any])


def one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def fail(command: str, message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"weft {command}: {one_line(message)}", err=True)
    sys.exit(code)


def exit_code(exc: BaseException) -> int:
    if isinstance(exc, UnicodeEncodeError):  # (see `describe`)
        return EXIT_USAGE
    if isinstance(exc, NotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(exc, UnavailableError):
        return EXIT_UNREACHABLE
    if isinstance(exc, InvalidArgumentError):
        return EXIT_USAGE
    return EXIT_FAILED


def reports_errors(fn: F) -> F:
    """Turn what a command raises into one line on stderr and its exit code;
    with `weft --debug`, re-raise so the traceback shows."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        # "auth key create", not "create": the path below the root command.
        name = " ".join(ctx.command_path.split()[1:]) or ctx.command.name or "weft"
        try:
            return fn(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, SystemExit):
            raise
        except KeyboardInterrupt:
            fail(name, "interrupted", 130)
        except Exception as exc:
            if (ctx.find_root().obj or {}).get("debug"):
                raise
            fail(name, describe(exc, kwargs.get("address", "")), exit_code(exc))

    return wrapper  # type: ignore[return-value]


def describe(exc: BaseException, address: str) -> str:
    if isinstance(exc, UnicodeEncodeError):
        # Text that cannot be sent: an argument that was not UTF-8 (Python
        # keeps its bytes as lone surrogates), or a JSON "\\ud800" escape.
        bad = exc.object[exc.start : exc.end] if isinstance(exc.object, str) else ""
        return f"text that is not valid UTF-8 cannot be sent ({bad!r} in {exc.object[:40]!r})"
    if isinstance(exc, UnavailableError):
        return f"cannot reach a Weft server at {address}: {one_line(exc.message)}"
    if isinstance(exc, WeftError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"

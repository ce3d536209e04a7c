"""`weft.shell`: a command run by `sh` on a runner started with `--allow-shell`;
values travel as its positional parameters, never as its text (see the
package's docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sdk.activity import activity
from workers.builtins.common import (
    VERSION,
    InvalidInput,
    ShellExitError,
    ShellNotAllowed,
    _beating,
    _clip,
    _describe,
    _expected,
    _fields,
    _kind,
    _strings,
)
from workers.steps.model import SHELL_ACTIVITY

# A command's process group gets this long to exit on SIGTERM before SIGKILL.
KILL_GRACE = 2.0
_SHELL_INPUT: dict[str, Any] = {"command": None, "args": [], "env": {}, "exit_code": 0}


# `$0` of the script: what the shell names itself in its own error messages.
SHELL_NAME = SHELL_ACTIVITY


@dataclass(frozen=True)
class ShellValue:
    """A value inside a shell step's command template: it becomes an argument
    of the script, never part of its text."""

    text: str


def shell_script(pieces: Sequence[str | ShellValue]) -> tuple[str, list[str]]:
    """The script and its arguments for a template: literal text (the
    definition's own shell code) and values, in order. Each value is replaced
    by a reference to the next positional parameter, written for the quoting
    the literal text has open at that point: `"${N}"` outside quotes, `${N}`
    inside double quotes, `'"${N}"'` inside single quotes. A parameter's value
    is expanded and never parsed, so whatever the value holds (`;`, `$(…)`,
    quotes, newlines) stays data; a quote mistracked (inside `$(…)` within
    double quotes, say) can change how a value is split, never run it."""
    script: list[str] = []
    args: list[str] = []
    quote = ""  # the quote open at this point of the script: "", "'" or '"'
    for piece in pieces:
        if isinstance(piece, ShellValue):
            args.append(piece.text)
            ref = f"${{{len(args)}}}"
            script.append({"": f'"{ref}"', '"': ref, "'": f"'\"{ref}\"'"}[quote])
        else:
            script.append(piece)
            quote = _quote_after(piece, quote)
    return "".join(script), args


def _quote_after(text: str, quote: str) -> str:
    """The quote open after `text`, given the one open before it (POSIX sh:
    nothing escapes inside single quotes; a backslash escapes the next character
    elsewhere)."""
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":
            escaped = True
        elif char == quote:
            quote = ""
        elif not quote and char in "'\"":
            quote = char
    return quote


@dataclass(frozen=True)
class ShellCall:
    """A checked `weft.shell` input."""

    command: str
    args: list[str]
    env: dict[str, str]
    expected: frozenset[int] | None

    @classmethod
    def from_input(cls, request: Any) -> ShellCall:
        given = _fields(request, SHELL_ACTIVITY, _SHELL_INPUT)
        command = given["command"]
        if not isinstance(command, str) or not command.strip():
            raise InvalidInput(f"{SHELL_ACTIVITY}: command must be non-empty text")
        return cls(
            command=command,
            args=_arguments(given["args"]),
            env=_strings(given["env"], "env"),
            expected=_expected(given["exit_code"], "exit_code"),
        )

    def expects(self, code: int) -> bool:
        return self.expected is None or code in self.expected


def _arguments(value: Any) -> list[str]:
    """The script's positional parameters: text (numbers and booleans as JSON)."""
    if not isinstance(value, list):
        raise InvalidInput(f"{SHELL_ACTIVITY}: args must be a list of text, not {_kind(value)}")
    return list(_strings(dict(enumerate(value)), "args").values())


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """Stop the command and whatever it started (its own process group):
    SIGTERM, then SIGKILL if it is still there after a grace period."""
    _signal_group(proc, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), KILL_GRACE)
    except TimeoutError:
        _signal_group(proc, signal.SIGKILL)
        await proc.wait()


def _signal_group(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group has exited already
        os.killpg(proc.pid, sig)


@activity(name=SHELL_ACTIVITY, version=VERSION)
async def shell(request: Any) -> dict[str, Any]:
    """A shell command (`/bin/sh -c COMMAND weft.shell ARGS…`) with the runner's
    environment plus `env`; its output and exit code, or `ShellExitError` if the
    code is not the expected one (default 0). Cancelled, it kills the command's
    process group."""
    call = ShellCall.from_input(request)
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        call.command,
        SHELL_NAME,
        *call.args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **call.env},
        start_new_session=True,  # a process group of its own, to kill as a whole
    )
    try:
        out, err = await _beating(proc.communicate())
    except BaseException:
        await asyncio.shield(_kill(proc))
        raise
    code = await proc.wait()  # at once: communicate() saw it exit
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    if not call.expects(code):
        raise ShellExitError(
            f"`{call.command}` exited with {code}; expected {_describe(call.expected)}",
            details={
                "command": call.command,
                **({"args": call.args} if call.args else {}),
                "exit_code": code,
                "stdout": _clip(stdout),
                "stderr": _clip(stderr),
            },
        )
    return {"stdout": stdout, "stderr": stderr, "exit_code": code}


async def _shell_not_allowed(request: Any) -> None:
    raise ShellNotAllowed(
        "this runner does not run shell commands: start it with `weft runner --allow-shell`"
    )

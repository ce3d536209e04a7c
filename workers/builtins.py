"""The built-in activities of every `weft runner`: `weft.http` and `weft.shell`.

They are what the step language's `http URL` and `shell COMMAND` steps schedule
(STEPS.md), written as ordinary `@activity` functions, so they heartbeat, hear
cancellation and report failures like user activities do.

    weft.http  {url, method="GET", headers={}, body=None, status_code=None, timeout=60}
               -> {status_code, headers, content, content_json}
    weft.shell {command, env={}, exit_code=0}
               -> {stdout, stderr, exit_code}

A status code or exit code the step did not expect fails the activity with
`HttpStatusError` / `ShellExitError`, the response or output in the details, so
an `on-error` handler can test it. A runner offers `weft.shell` only when started
with `--allow-shell`: a shell command runs with the runner's rights, so the
operator opts in; without it, a shell task fails at once with `ShellNotAllowed`
(not retryable: waiting cannot help) instead of waiting for a runner that never
takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from email.message import Message
from http.client import HTTPException, HTTPMessage
from typing import Any, TypeVar

from sdk.activity import ActivityDefinition, activity
from sdk.durations import parse_duration
from sdk.errors import ActivityFailure, NonRetryableError, WeftError
from workers.steps.model import HTTP_ACTIVITY, SHELL_ACTIVITY

__all__ = [
    "HttpRequestError",
    "HttpStatusError",
    "InvalidInput",
    "ShellExitError",
    "ShellNotAllowed",
    "builtins",
    "http",
    "shell",
]

T = TypeVar("T")
A = TypeVar("A")
VERSION = "1"
# How often a running built-in heartbeats: the answers are how the runner hears
# that the step was cancelled (the SDK throttles what it actually sends).
BEAT_EVERY = 1.0
# A command's process group gets this long to exit on SIGTERM before SIGKILL.
KILL_GRACE = 2.0
DEFAULT_HTTP_TIMEOUT = 60.0
# Past this a response could never be a result (payloads are 256 KiB by default):
# stop reading instead of holding it all in memory.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
# How much of a response or of a command's output a failure's details keep: the
# details are a payload too, and one over the limit would lose the failure.
DETAIL_CHARS = 8 * 1024


class InvalidInput(NonRetryableError):
    """The built-in activity's input is malformed: the same input fails again."""


class HttpStatusError(ActivityFailure):
    """The server answered with a status code the step did not expect."""


class HttpRequestError(ActivityFailure):
    """The request got no answer (refused, unknown host, timed out, …); may be retried."""


class ShellExitError(ActivityFailure):
    """The command exited with a code the step did not expect."""


class ShellNotAllowed(NonRetryableError):
    """This runner does not run shell commands: start it with `weft runner --allow-shell`."""


# -- input checking ------------------------------------------------------------------------


def _fields(request: Any, activity_type: str, known: Mapping[str, Any]) -> dict[str, Any]:
    """The input as a dict with defaults filled in; unknown keys are refused, so a
    misspelt option (`status-code`) is not silently ignored."""
    if not isinstance(request, dict):
        raise InvalidInput(f"{activity_type} takes an object as input, not {_kind(request)}")
    unknown = sorted(set(request) - set(known))
    if unknown:
        raise InvalidInput(
            f"{activity_type}: unknown input {', '.join(map(repr, unknown))}"
            f" (known: {', '.join(known)})"
        )
    return {**known, **{k: v for k, v in request.items() if v is not None}}


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _expected(value: Any, what: str) -> frozenset[int] | None:
    """An expected code: a number, a list of numbers, or "any" (None: any code)."""
    if isinstance(value, str) and value.strip().lower() == "any":
        return None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        raise InvalidInput(f'{what} must be a number, a list of numbers or "any", not {value!r}')
    return frozenset(items)


def _describe(codes: frozenset[int] | None) -> str:
    if codes is None:
        return "any"
    return " or ".join(str(c) for c in sorted(codes))


def _strings(value: Any, what: str) -> dict[str, str]:
    """Headers or environment variables: names to text (numbers and booleans as JSON)."""
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} must be an object of names to values, not {_kind(value)}")
    out: dict[str, str] = {}
    for name, item in value.items():
        if isinstance(item, bool):
            out[str(name)] = "true" if item else "false"
        elif isinstance(item, str | int | float):
            out[str(name)] = str(item)
        else:
            raise InvalidInput(f"{what}: {name!r} must be text or a number, not {_kind(item)}")
    return out


def _clip(text: str) -> str:
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS] + "… (truncated)"


# -- heartbeats and cancellation ---------------------------------------------------------------


def _beat() -> None:
    # Called directly, outside a runner (a test, a script): nobody to tell.
    with contextlib.suppress(WeftError):
        activity.heartbeat()


async def _beating(work: Awaitable[T]) -> T:
    """Await `work`, heartbeating meanwhile. Cancelling this (the step was
    cancelled, or its start-to-close passed) cancels `work` too."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            _beat()
            done, _ = await asyncio.wait({task}, timeout=BEAT_EVERY)
            if done:
                return task.result()
    finally:
        task.cancel()


async def _in_thread(fn: Callable[[A], T], arg: A) -> T:
    """`fn(arg)` in a daemon thread of its own, so a blocking call keeps the
    runner's loop free. Not the loop's default executor: `asyncio.run` would wait
    for a call still running there before the runner could exit. Cancelled, the
    call finishes by itself and its outcome is dropped."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(apply: Callable[[Any], None], value: Any) -> None:
        def on_loop() -> None:
            if not future.done():  # not cancelled meanwhile
                apply(value)

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(on_loop)

    def target() -> None:
        try:
            result = fn(arg)
        except BaseException as exc:
            settle(future.set_exception, exc)
        else:
            settle(future.set_result, result)

    threading.Thread(target=target, name="weft-builtin", daemon=True).start()
    return await future


# -- weft.http ---------------------------------------------------------------------------------

_HTTP_INPUT: dict[str, Any] = {
    "url": None,
    "method": "GET",
    "headers": {},
    "body": None,
    "status_code": None,
    "timeout": DEFAULT_HTTP_TIMEOUT,
}
_SUCCESS = frozenset(range(200, 300))


@dataclass(frozen=True)
class HttpCall:
    """A checked `weft.http` input."""

    url: str
    method: str
    headers: dict[str, str]
    body: bytes | None
    expected: frozenset[int] | None
    timeout: float

    @classmethod
    def from_input(cls, request: Any) -> HttpCall:
        given = _fields(request, HTTP_ACTIVITY, _HTTP_INPUT)
        url = given["url"]
        if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise InvalidInput(f"{HTTP_ACTIVITY}: url must be an http:// or https:// URL")
        method = given["method"]
        if not isinstance(method, str) or not method.strip().isalpha():
            raise InvalidInput(f"{HTTP_ACTIVITY}: method must be a word such as GET or POST")
        headers = _strings(given["headers"], "headers")
        status = given["status_code"]
        return cls(
            url=url,
            method=method.strip().upper(),
            headers=headers,
            body=_body(given["body"], headers),
            expected=_SUCCESS if status is None else _expected(status, "status_code"),
            timeout=_seconds(given["timeout"]),
        )

    def expects(self, status: int) -> bool:
        return self.expected is None or status in self.expected

    def expectation(self) -> str:
        return "a 2xx status" if self.expected is _SUCCESS else _describe(self.expected)


def _body(value: Any, headers: dict[str, str]) -> bytes | None:
    """Text is sent as it is; anything else as JSON. Either way the matching
    Content-Type is added to `headers`, unless the step gave its own."""
    if value is None:
        return None
    typed = any(name.lower() == "content-type" for name in headers)
    if isinstance(value, str):
        if not typed:
            headers["Content-Type"] = "text/plain; charset=utf-8"
        return value.encode()
    if not typed:
        headers["Content-Type"] = "application/json"
    return json.dumps(value).encode()


def _seconds(value: Any) -> float:
    try:
        if isinstance(value, str):
            seconds = parse_duration(value).total_seconds()
        elif isinstance(value, int | float) and not isinstance(value, bool):
            seconds = float(value)
        else:
            raise ValueError(f"not {_kind(value)}")
    except ValueError as exc:
        raise InvalidInput(f"{HTTP_ACTIVITY}: timeout is seconds or a duration: {exc}") from None
    if seconds <= 0:
        raise InvalidInput(f"{HTTP_ACTIVITY}: timeout must be positive")
    return seconds


@dataclass(frozen=True)
class HttpResponse:
    status_code: int
    headers: dict[str, str]
    content: str

    def result(self) -> dict[str, Any]:
        return {
            "status_code": self.status_code,
            "headers": self.headers,
            "content": self.content,
            "content_json": _json_or_none(self.content),
        }


def _json_or_none(text: str) -> Any:
    """The content parsed as JSON when it is JSON, whatever the content type says."""
    try:
        return json.loads(text) if text.strip() else None
    except ValueError:
        return None


class _WebOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects to http(s) only: a step asked for a web request, never a
    file or FTP read on the runner."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            fp.close()  # the redirect's own answer, which urllib closes only on success
            raise urllib.error.URLError(f"refusing a redirect to a non-HTTP URL ({newurl})")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _fetch(call: HttpCall) -> HttpResponse:
    """The request, blocking (run in a thread). A non-2xx answer is an answer,
    not an error: the caller checks it against the step's expectation."""
    try:
        return _exchange(call)
    except (urllib.error.URLError, HTTPException, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise HttpRequestError(
            f"{call.method} {call.url}: {reason}",
            details={"url": call.url, "method": call.method, "error": str(reason)},
        ) from None


def _exchange(call: HttpCall) -> HttpResponse:
    opener = urllib.request.build_opener(_WebOnlyRedirects)
    request = urllib.request.Request(
        call.url, data=call.body, headers=call.headers, method=call.method
    )
    answer: Any
    try:
        answer = opener.open(request, timeout=call.timeout)
    except urllib.error.HTTPError as exc:  # urllib's word for a non-2xx answer
        answer = exc
    with answer:
        return _response(answer.getcode(), answer.headers, answer)


def _response(status: int, headers: Message, stream: Any) -> HttpResponse:
    data = stream.read(MAX_RESPONSE_BYTES + 1)
    if len(data) > MAX_RESPONSE_BYTES:
        raise ActivityFailure(
            f"the response is over {MAX_RESPONSE_BYTES} bytes", reason="PayloadTooLarge"
        )
    charset = headers.get_content_charset() or "utf-8"
    try:
        content = data.decode(charset, errors="replace")
    except LookupError:  # a charset Python does not know
        content = data.decode("utf-8", errors="replace")
    # Names in lower case (as HTTP/2 sends them), repeated headers joined as HTTP allows.
    merged: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        merged[key] = f"{merged[key]}, {value}" if key in merged else value
    return HttpResponse(status, merged, content)


@activity(name=HTTP_ACTIVITY, version=VERSION)
async def http(request: Any) -> dict[str, Any]:
    """An HTTP request; its response, or `HttpStatusError` if the status is not
    the expected one (default: any 2xx)."""
    call = HttpCall.from_input(request)
    response = await _beating(_in_thread(_fetch, call))
    if not call.expects(response.status_code):
        content = _clip(response.content)
        raise HttpStatusError(
            f"{call.method} {call.url} answered {response.status_code};"
            f" expected {call.expectation()}",
            details={
                "url": call.url,
                "method": call.method,
                "status_code": response.status_code,
                "headers": response.headers,
                "content": content,
                "content_json": _json_or_none(content),
            },
        )
    return response.result()


# -- weft.shell --------------------------------------------------------------------------------

_SHELL_INPUT: dict[str, Any] = {"command": None, "env": {}, "exit_code": 0}


@dataclass(frozen=True)
class ShellCall:
    """A checked `weft.shell` input."""

    command: str
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
            env=_strings(given["env"], "env"),
            expected=_expected(given["exit_code"], "exit_code"),
        )

    def expects(self, code: int) -> bool:
        return self.expected is None or code in self.expected


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
    """A shell command (`/bin/sh -c`) with the runner's environment plus `env`;
    its output and exit code, or `ShellExitError` if the code is not the
    expected one (default 0). Cancelled, it kills the command's process group."""
    call = ShellCall.from_input(request)
    proc = await asyncio.create_subprocess_shell(
        call.command,
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


def builtins(*, allow_shell: bool) -> list[ActivityDefinition]:
    """The built-in activities a runner offers: `weft.http` always; `weft.shell`
    with `allow_shell`, else a stand-in that refuses every shell task at once."""
    if allow_shell:
        return [http, shell]
    refuse = activity(name=SHELL_ACTIVITY, version=VERSION)(_shell_not_allowed)
    return [http, refuse]

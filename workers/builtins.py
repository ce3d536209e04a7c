"""The built-in activities of every `weft runner`: `weft.http` and `weft.shell`.

They are what the step language's `http URL` and `shell COMMAND` steps schedule
(STEPS.md), written as ordinary `@activity` functions, so they heartbeat, hear
cancellation and report failures like user activities do.

    weft.http  {url, method="GET", headers={}, body=None, status_code=None, timeout=60}
               -> {status_code, headers, content, content_json}
    weft.shell {command, args=[], env={}, exit_code=0}
               -> {stdout, stderr, exit_code}

Values never become shell text: `command` is the script the definition wrote,
and the values a step puts into it travel as positional parameters (`args`,
read as `"$1"`, `"$2"`, … by `sh -c COMMAND weft.shell ARGS…`), which the shell
expands but never parses. `shell_script` builds that pair from a template's
literal text and values, so an input `world; id > f` is echoed, not run.

A status code or exit code the step did not expect fails the activity with
`HttpStatusError` / `ShellExitError`, the response or output in the details, so
an `on-error` handler can test it.

Both are off until the operator opts in, since each acts with the runner's
rights. `weft.shell` runs only on a runner started with `--allow-shell`.
`weft.http` reaches only the hosts of `--allow-http HOST` (`*`: any host whose
addresses are all public): a private, loopback, link-local, multicast or
unspecified address (every address a name resolves to is checked, and the
connection goes to a checked one) is refused unless its host is listed by name
or address, and each redirect is checked the same way, so a step cannot make a
runner fetch its cloud's metadata or an internal service. Proxies of the
environment are not used: through one, the checks could not hold. Refused, a
task fails at once with `ShellNotAllowed` / `HttpNotAllowed` (not retryable:
waiting cannot help) instead of waiting for a runner that never takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import os
import re
import signal
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from email.message import Message
from http.client import (
    HTTPConnection,
    HTTPException,
    HTTPMessage,
    HTTPResponse,
    HTTPSConnection,
)
from typing import Any, TypeVar

from sdk.activity import ActivityDefinition, activity
from sdk.durations import parse_duration
from sdk.errors import ActivityFailure, NonRetryableError, WeftError
from workers.steps.model import HTTP_ACTIVITY, SHELL_ACTIVITY

__all__ = [
    "HTTP_OFF",
    "HttpNotAllowed",
    "HttpPolicy",
    "HttpRequestError",
    "HttpStatusError",
    "InvalidInput",
    "ShellExitError",
    "ShellNotAllowed",
    "ShellValue",
    "builtins",
    "http",
    "http_activity",
    "shell",
    "shell_script",
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


class HttpNotAllowed(NonRetryableError):
    """This runner may not make this request: see `weft runner --allow-http`."""


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


ANY_PUBLIC_HOST = "*"
ALLOW_HTTP_FLAG = "--allow-http"


@dataclass(frozen=True)
class HttpPolicy:
    """Where a runner's `weft.http` may connect (`weft runner --allow-http`).

    `hosts` are names or addresses the operator listed: reachable at any
    address, private ones included. `any_public`: any other host too, provided
    every address it resolves to is public. Neither: `weft.http` is off."""

    hosts: frozenset[str] = frozenset()
    any_public: bool = False

    @classmethod
    def of(cls, entries: Iterable[str]) -> HttpPolicy:
        """From `--allow-http` values (each may hold several, comma-separated);
        `ValueError` names an entry that is not a host name or address."""
        hosts: set[str] = set()
        any_public = False
        for entry in (e.strip() for value in entries for e in value.split(",")):
            if entry == ANY_PUBLIC_HOST:
                any_public = True
            elif entry:
                hosts.add(_host_entry(entry))
        return cls(frozenset(hosts), any_public)

    @property
    def enabled(self) -> bool:
        return self.any_public or bool(self.hosts)

    def describe(self) -> list[str]:
        """The policy as the runner logs it."""
        return sorted(self.hosts) + ([ANY_PUBLIC_HOST] if self.any_public else [])

    def check_url(self, url: str) -> None:
        """Refuse a URL this runner may not fetch, by its host's name alone."""
        if not self.enabled:
            raise HttpNotAllowed(
                f"weft.http is off on this runner: start it with"
                f" `weft runner {ALLOW_HTTP_FLAG} HOST` to let it reach HOST"
            )
        host = _normal_host(urllib.parse.urlsplit(url).hostname or "")
        if not host:
            raise InvalidInput(f"{HTTP_ACTIVITY}: {url!r} names no host")
        if host not in self.hosts and not self.any_public:
            raise HttpNotAllowed(
                f"{host} is not one of the hosts this runner may reach"
                f" ({ALLOW_HTTP_FLAG} {','.join(self.describe())})"
            )

    def check_address(self, host: str, address: str) -> None:
        """Refuse to connect to `address` (one that `host` resolved to) when it
        is not public, unless the operator listed the host or the address."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # fe80::1%eth0
        if _normal_host(host) in self.hosts or str(ip) in self.hosts or _public(ip):
            return
        raise HttpNotAllowed(
            f"{host} resolves to {ip}, a private or special address: this runner"
            f" reaches one only if listed ({ALLOW_HTTP_FLAG} {host})"
        )


def _normal_host(host: str) -> str:
    """A host as listed and compared: lower case, no brackets or final dot, an
    address in its canonical spelling."""
    host = host.strip().lower().removeprefix("[").removesuffix("]").removesuffix(".")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def _host_entry(entry: str) -> str:
    host = _normal_host(entry)
    if not _HOST_NAME.fullmatch(host) and not _is_address(host):
        raise ValueError(
            f"{entry!r} is not a host name or address (no scheme, port or path;"
            f" {ANY_PUBLIC_HOST!r} for any public host)"
        )
    return host


_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether `ip` is an ordinary Internet address. `is_global` alone lets some
    multicast ranges through, and an IPv4 address inside IPv6 (`::ffff:10.0.0.1`)
    is judged as the IPv4 address it is."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    special = (
        ip.is_private,
        ip.is_loopback,
        ip.is_link_local,
        ip.is_multicast,
        ip.is_unspecified,
        ip.is_reserved,
    )
    return ip.is_global and not any(special)


def _checked_connection(
    policy: HttpPolicy,
) -> Callable[[tuple[str, int], float | None, tuple[str, int] | None], socket.socket]:
    """`socket.create_connection` for `http.client`, checking every address the
    host resolves to and connecting to one of those checked: resolving again
    after the check would let a DNS answer change in between (rebinding)."""

    def connect(
        address: tuple[str, int], timeout: float | None, source: tuple[str, int] | None
    ) -> socket.socket:
        host, port = address
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        for *_, sockaddr in found:
            policy.check_address(host, str(sockaddr[0]))
        error: OSError | None = None
        for family, kind, proto, _, sockaddr in found:
            sock = socket.socket(family, kind, proto)
            try:
                if timeout is not None:
                    sock.settimeout(timeout)
                if source:
                    sock.bind(source)
                sock.connect(sockaddr)
            except OSError as exc:
                sock.close()
                error = exc
            else:
                return sock
        raise error or OSError(f"{host} has no address")

    return connect


class _CheckedHTTPConnection(HTTPConnection):
    def __init__(self, *args: Any, policy: HttpPolicy, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _checked_connection(policy)


class _CheckedHTTPSConnection(HTTPSConnection):
    """TLS over a checked connection; the certificate is still checked against
    the URL's host name."""

    def __init__(self, *args: Any, policy: HttpPolicy, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _checked_connection(policy)


class _CheckedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, policy: HttpPolicy) -> None:
        super().__init__()
        self.policy = policy

    def http_open(self, req: urllib.request.Request) -> HTTPResponse:
        return self.do_open(functools.partial(_CheckedHTTPConnection, policy=self.policy), req)


class _CheckedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, policy: HttpPolicy) -> None:
        super().__init__()
        self.policy = policy

    def https_open(self, req: urllib.request.Request) -> HTTPResponse:
        # No context given: the connection makes the default one, which checks
        # the certificate and the host name.
        connection = functools.partial(_CheckedHTTPSConnection, policy=self.policy)
        return self.do_open(connection, req)


class _WebOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects to http(s) only: a step asked for a web request, never a
    file or FTP read on the runner; and only to a host the policy allows, as
    the first request was."""

    def __init__(self, policy: HttpPolicy) -> None:
        super().__init__()
        self.policy = policy

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        try:
            if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
                raise urllib.error.URLError(f"refusing a redirect to a non-HTTP URL ({newurl})")
            self.policy.check_url(newurl)
        except (urllib.error.URLError, HttpNotAllowed):
            fp.close()  # the redirect's own answer, which urllib closes only on success
            raise
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _fetch(call: HttpCall, policy: HttpPolicy) -> HttpResponse:
    """The request, blocking (run in a thread). A non-2xx answer is an answer,
    not an error: the caller checks it against the step's expectation."""
    try:
        return _exchange(call, policy)
    except (urllib.error.URLError, HTTPException, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise HttpRequestError(
            f"{call.method} {call.url}: {reason}",
            details={"url": call.url, "method": call.method, "error": str(reason)},
        ) from None


def _exchange(call: HttpCall, policy: HttpPolicy) -> HttpResponse:
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),  # the environment's proxies: see the module's doc
        _CheckedHTTPHandler(policy),
        _CheckedHTTPSHandler(policy),
        _WebOnlyRedirects(policy),
    )
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


def http_activity(policy: HttpPolicy) -> ActivityDefinition:
    """`weft.http` reaching what `policy` allows."""

    async def http(request: Any) -> dict[str, Any]:
        """An HTTP request; its response, or `HttpStatusError` if the status is
        not the expected one (default: any 2xx)."""
        call = HttpCall.from_input(request)
        policy.check_url(call.url)
        return await _http(call, policy)

    return activity(name=HTTP_ACTIVITY, version=VERSION)(http)


async def _http(call: HttpCall, policy: HttpPolicy) -> dict[str, Any]:
    response = await _beating(_in_thread(lambda c: _fetch(c, policy), call))
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


# No host: `weft.http` off, as a runner has it by default.
HTTP_OFF = HttpPolicy()
http = http_activity(HTTP_OFF)


# -- weft.shell --------------------------------------------------------------------------------

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


def builtins(*, allow_shell: bool, allow_http: HttpPolicy = HTTP_OFF) -> list[ActivityDefinition]:
    """The built-in activities a runner offers: `weft.http` within `allow_http`
    (by default it refuses every task at once); `weft.shell` with `allow_shell`,
    else a stand-in that refuses every shell task at once."""
    web = http if allow_http == HTTP_OFF else http_activity(allow_http)
    if allow_shell:
        return [web, shell]
    refuse = activity(name=SHELL_ACTIVITY, version=VERSION)(_shell_not_allowed)
    return [web, refuse]

"""`weft.http`: an HTTP request from a runner, to the hosts its `--allow-http`
policy allows (see the package's docstring)."""

from __future__ import annotations

import functools
import ipaddress
import json
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.message import Message
from http.client import (
    HTTPConnection,
    HTTPException,
    HTTPMessage,
    HTTPResponse,
    HTTPSConnection,
)
from typing import Any

from sdk.activity import ActivityDefinition, activity
from sdk.durations import parse_duration
from sdk.errors import ActivityFailure
from workers.builtins.common import (
    VERSION,
    HttpNotAllowed,
    HttpRequestError,
    HttpStatusError,
    InvalidInput,
    _beating,
    _clip,
    _describe,
    _expected,
    _fields,
    _in_thread,
    _kind,
    _strings,
)
from workers.steps.model import HTTP_ACTIVITY

DEFAULT_HTTP_TIMEOUT = 60.0


# Past this a response could never be a result (payloads are 256 KiB by default):
# stop reading instead of holding it all in memory.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
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

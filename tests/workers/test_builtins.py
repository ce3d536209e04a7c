"""The built-in activities: `weft.http` against a local HTTP server in a thread,
`weft.shell` with real commands (including one that is cancelled and one that
ignores SIGTERM), their input checks, and how the runner offers them."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from sdk.activity_worker import failure_of
from sdk.errors import ActivityFailure
from tests.helpers import QuietHTTPServer, wait_until
from workers import builtins
from workers.builtins import (
    HttpPolicy,
    HttpRequestError,
    HttpStatusError,
    InvalidInput,
    ShellExitError,
    ShellNotAllowed,
    http_activity,
    shell,
    weft_shell,
)
from workers.loader import LoadError
from workers.runner import with_builtins

# The local test server's host, allowed (`weft runner --allow-http 127.0.0.1`).
http = http_activity(HttpPolicy.of(["127.0.0.1"]))


class Handler(BaseHTTPRequestHandler):
    """`/json`, `/text`, `/status/N`, `/slow`, `/redirect?to=URL`, and `/echo`,
    which answers with the method, headers and body it received."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def do_PUT(self) -> None:
        self._route()

    def _route(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/json":
            self._send(200, b'{"vm_id": "vm-1", "ok": true}', "application/json")
        elif path == "/text":
            self._send(200, b"plain words", "text/plain; charset=utf-8")
        elif path.startswith("/status/"):
            self._send(int(path.rsplit("/", 1)[1]), b'{"error": "nope"}', "application/json")
        elif path == "/slow":
            threading.Event().wait(2)
            self._send(200, b"late", "text/plain")
        elif path == "/redirect":
            self.send_response(302)
            self.send_header("Location", query.removeprefix("to="))
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            length = int(self.headers.get("Content-Length") or 0)
            echo = {
                "method": self.command,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": self.rfile.read(length).decode(),
            }
            self._send(201, json.dumps(echo).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Repeated", "one")
        self.send_header("X-Repeated", "two")
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# -- weft.http --------------------------------------------------------------------------------


async def test_http_get_parses_json_content(base_url: str) -> None:
    result = await http({"url": f"{base_url}/json"})
    assert result["status_code"] == 200
    assert result["content_json"] == {"vm_id": "vm-1", "ok": True}
    assert json.loads(result["content"]) == result["content_json"]
    # header names in lower case; a repeated header is joined
    assert result["headers"]["content-type"] == "application/json"
    assert result["headers"]["x-repeated"] == "one, two"


async def test_http_content_that_is_not_json_has_null_content_json(base_url: str) -> None:
    result = await http({"url": f"{base_url}/text"})
    assert result["content"] == "plain words"
    assert result["content_json"] is None


async def test_http_post_sends_a_map_body_as_json(base_url: str) -> None:
    result = await http(
        {
            "url": f"{base_url}/echo",
            "method": "post",
            "headers": {"X-Request-Id": "r-1", "X-Attempt": 2},
            "body": {"size": "small", "tags": [1, 2]},
        }
    )
    assert result["status_code"] == 201  # any 2xx is expected by default
    echo = result["content_json"]
    assert echo["method"] == "POST"
    assert json.loads(echo["body"]) == {"size": "small", "tags": [1, 2]}
    assert echo["headers"]["content-type"] == "application/json"
    assert echo["headers"]["x-request-id"] == "r-1"
    assert echo["headers"]["x-attempt"] == "2"


async def test_http_text_body_and_the_steps_own_content_type(base_url: str) -> None:
    text = await http({"url": f"{base_url}/echo", "method": "PUT", "body": "hello"})
    assert text["content_json"]["body"] == "hello"
    assert text["content_json"]["headers"]["content-type"].startswith("text/plain")
    own = await http(
        {
            "url": f"{base_url}/echo",
            "method": "POST",
            "headers": {"content-type": "application/merge-patch+json"},
            "body": {"a": 1},
        }
    )
    assert own["content_json"]["headers"]["content-type"] == "application/merge-patch+json"


async def test_http_an_unexpected_status_fails_with_the_response(base_url: str) -> None:
    with pytest.raises(HttpStatusError) as caught:
        await http({"url": f"{base_url}/status/404"})
    error = caught.value
    assert "answered 404; expected a 2xx status" in str(error)
    assert error.details["status_code"] == 404
    assert error.details["content_json"] == {"error": "nope"}
    reason, details, non_retryable = failure_of(error)
    assert reason == "HttpStatusError"
    assert details["details"]["url"] == f"{base_url}/status/404"
    assert not non_retryable


@pytest.mark.parametrize(
    ("status_code", "path", "passes"),
    [
        (404, "/status/404", True),
        ([200, 503], "/status/503", True),
        ("any", "/status/500", True),
        (200, "/echo", False),  # 201 is a 2xx, but not the one asked for
        ([400, 404], "/status/500", False),
    ],
)
async def test_http_status_code_names_the_expected_codes(
    base_url: str, status_code: Any, path: str, passes: bool
) -> None:
    request = {"url": base_url + path, "status_code": status_code}
    if passes:
        assert (await http(request))["status_code"] == int(path.rsplit("/", 1)[1])
    else:
        with pytest.raises(HttpStatusError):
            await http(request)


async def test_http_follows_web_redirects_only(base_url: str) -> None:
    followed = await http({"url": f"{base_url}/redirect?to={base_url}/json"})
    assert followed["content_json"]["vm_id"] == "vm-1"
    with pytest.raises(HttpRequestError, match="non-HTTP URL"):
        await http({"url": f"{base_url}/redirect?to=ftp://127.0.0.1/etc/passwd"})
    # urllib itself stops at a redirect to a file: the answer is the redirect
    with pytest.raises(HttpStatusError, match="answered 302"):
        await http({"url": f"{base_url}/redirect?to=file:///etc/passwd"})


async def test_http_no_answer_is_a_retryable_request_error(
    base_url: str, unused_tcp_port: int
) -> None:
    with pytest.raises(HttpRequestError) as refused:
        await http({"url": f"http://127.0.0.1:{unused_tcp_port}/"})
    assert refused.value.details["url"] == f"http://127.0.0.1:{unused_tcp_port}/"
    assert not refused.value.non_retryable
    with pytest.raises(HttpRequestError, match="timed out"):
        await http({"url": f"{base_url}/slow", "timeout": "200ms"})


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        (None, "takes an object"),
        ({"method": "GET"}, "url must be"),
        ({"url": "file:///etc/passwd"}, "url must be"),
        ({"url": "http://x", "status-code": 200}, "unknown input 'status-code'"),
        ({"url": "http://x", "headers": ["a"]}, "headers must be an object"),
        ({"url": "http://x", "headers": {"a": {"b": 1}}}, "'a' must be text"),
        ({"url": "http://x", "status_code": "2xx"}, "status_code must be"),
        ({"url": "http://x", "timeout": "soon"}, "timeout is seconds or a duration"),
        ({"url": "http://x", "timeout": 0}, "timeout must be positive"),
        ({"url": "http://x", "method": "GET /x"}, "method must be a word"),
    ],
)
async def test_http_bad_input_fails_without_retries(request_: Any, says: str) -> None:
    with pytest.raises(InvalidInput, match=says) as caught:
        await http(request_)
    assert failure_of(caught.value)[2], "not worth retrying"


# -- weft.shell -------------------------------------------------------------------------------


async def test_shell_returns_output_and_exit_code() -> None:
    result = await shell({"command": "echo out; echo err >&2; printf '%s' \"$GREETING\""})
    assert result == {"stdout": "out\n", "stderr": "err\n", "exit_code": 0}
    result = await shell(
        {"command": 'printf "%s %s" "$GREETING" "$N"', "env": {"GREETING": "hi", "N": 3}}
    )
    assert result["stdout"] == "hi 3"


async def test_shell_keeps_the_runners_environment() -> None:
    result = await shell({"command": 'printf "%s" "$PATH"'})
    assert result["stdout"] == os.environ["PATH"]


async def test_shell_an_unexpected_exit_code_fails_with_the_output() -> None:
    with pytest.raises(ShellExitError) as caught:
        await shell({"command": "echo partial; echo broken >&2; exit 3"})
    error = caught.value
    assert str(error) == "`echo partial; echo broken >&2; exit 3` exited with 3; expected 0"
    assert error.details == {
        "command": "echo partial; echo broken >&2; exit 3",
        "exit_code": 3,
        "stdout": "partial\n",
        "stderr": "broken\n",
    }
    assert failure_of(error)[0] == "ShellExitError"


@pytest.mark.parametrize(
    ("exit_code", "code", "passes"),
    [(3, 3, True), ([0, 1], 1, True), ("any", 7, True), ("ANY", 0, True), ([0, 1], 2, False)],
)
async def test_shell_exit_code_names_the_expected_codes(
    exit_code: Any, code: int, passes: bool
) -> None:
    request = {"command": f"exit {code}", "exit_code": exit_code}
    if passes:
        assert (await shell(request))["exit_code"] == code
    else:
        with pytest.raises(ShellExitError):
            await shell(request)


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        ({}, "command must be"),
        ({"command": "  "}, "command must be"),
        ({"command": ["ls"]}, "command must be"),
        ({"command": "true", "exit_code": True}, "exit_code must be"),
        ({"command": "true", "exit_code": []}, "exit_code must be"),
        ({"command": "true", "env": "A=1"}, "env must be an object"),
        ({"command": "true", "cwd": "/tmp"}, "unknown input 'cwd'"),
    ],
)
async def test_shell_bad_input_fails_without_retries(request_: Any, says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        await shell(request_)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie awaiting its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def _started(tmp_path: Path, command: str) -> tuple[asyncio.Task[Any], list[int]]:
    """Run `command` as a shell activity until it has written its pids to a file."""
    pids = tmp_path / "pids"
    task = asyncio.create_task(shell({"command": command.format(pids=pids)}))

    async def written() -> list[int]:
        text = pids.read_text() if pids.exists() else ""
        return [int(p) for p in text.split()] if text.count("\n") >= 2 else []

    return task, await wait_until(written, timeout=10)


async def test_a_cancelled_shell_kills_the_command_and_its_children(tmp_path: Path) -> None:
    task, pids = await _started(tmp_path, "sleep 60 & echo $! >> {pids}; echo $$ >> {pids}; wait")
    assert all(_alive(pid) for pid in pids)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    async def gone() -> bool:
        return not any(_alive(pid) for pid in pids)

    await wait_until(gone, timeout=10)


async def test_a_command_that_ignores_sigterm_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(weft_shell, "KILL_GRACE", 0.3)
    task, pids = await _started(
        tmp_path, "trap '' TERM; echo $$ >> {pids}; echo $$ >> {pids}; while :; do sleep 0.1; done"
    )
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert not _alive(pids[0])


# -- what a runner offers ---------------------------------------------------------------------


async def test_without_allow_shell_a_shell_task_is_refused() -> None:
    offered = {a.name: a for a in builtins.builtins(allow_shell=False)}
    assert set(offered) == {"weft.http", "weft.shell"}
    assert offered["weft.http"] is builtins.http
    with pytest.raises(ShellNotAllowed, match="--allow-shell") as caught:
        await offered["weft.shell"].fn({"command": "true"})
    reason, _, non_retryable = failure_of(caught.value)
    assert (reason, non_retryable) == ("ShellNotAllowed", True)
    assert {a.name: a for a in builtins.builtins(allow_shell=True)}["weft.shell"] is shell


def test_the_runner_adds_the_builtins_and_keeps_their_names() -> None:
    from sdk import activity

    @activity
    def resize(image: dict[str, Any]) -> dict[str, Any]:
        return image

    names = [a.name for a in with_builtins([resize, builtins.http], allow_shell=False)]
    assert sorted(names) == ["resize", "weft.http", "weft.shell"]

    @activity(name="weft.http")
    def mine() -> None:
        pass

    with pytest.raises(LoadError, match=r"'weft\.http' is a built-in activity"):
        with_builtins([mine], allow_shell=True)


def test_the_builtins_are_version_1() -> None:
    assert (http.name, http.version, http.is_async) == ("weft.http", "1", True)
    assert (shell.name, shell.version, shell.is_async) == ("weft.shell", "1", True)
    assert isinstance(ShellNotAllowed(), ActivityFailure)


async def test_a_cancelled_http_call_returns_at_once(base_url: str) -> None:
    """The request's thread is left to finish; the activity does not wait for it."""
    task = asyncio.create_task(http({"url": f"{base_url}/slow"}))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 0.5)

"""The built-ins are safe by default (issue 15, findings 8 and 9), on real
`weft runner` processes: a value in a shell step's command is data, never shell
code; `weft.http` is off unless the runner lists hosts with `--allow-http`, and
then reaches only those (private addresses only when listed), redirects
included."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.cli.support import error_line, ok_json, weft
from tests.cli.test_cli_workers import RUN_ONE, Worker, closed_run, module_file, workers
from tests.helpers import QuietHTTPServer, unique
from workers.builtins import ShellValue, shell_script

__all__ = ["workers"]  # the fixture, imported for the tests below

HOSTILE = "world; id > {file}"

SHELL_STEP = """\
name: {name}
task_list: {task_list}
steps:
  - shell echo hello ${{input.who}}
  - return ${{output.stdout}}
"""


async def run_one(
    address: str,
    tmp_path: Path,
    workers: list[Worker],
    task: dict[str, Any],
    *runner_args: str,
) -> dict[str, Any]:
    """Run one activity task on a fresh `weft runner RUNNER_ARGS` process; the
    run's close event."""
    task_list = unique("safety")
    flow = module_file(tmp_path, "run_one", RUN_ONE)
    decider = Worker(address, tmp_path, "decider", "decider", "--task-list", task_list, flow)
    runner = Worker(address, tmp_path, "runner", "runner", "--task-list", task_list, *runner_args)
    workers += [decider, runner]
    for worker in workers:
        await worker.logged("worker.started")
    args = ["--task-list", task_list, "--input", json.dumps(task), "--json"]
    workflow_id = ok_json(weft("start", "run-one", *args, address=address))["workflow_id"]
    close = await closed_run(address, workflow_id)
    close["logs"] = decider.log() + runner.log()
    return close


# -- shell: values are arguments, never script text --------------------------------------


async def test_a_hostile_value_is_echoed_not_run_by_a_runner(
    address: str, tmp_path: Path, workers: list[Worker]
) -> None:
    planted = tmp_path / "planted"
    command, args = shell_script(["echo hello ", ShellValue(HOSTILE.format(file=planted))])
    task = {"type": "weft.shell", "input": {"command": command, "args": args}}
    close = await run_one(address, tmp_path, workers, task, "--allow-shell")
    assert close["type"] == "WorkflowSuccess", close["logs"]
    assert close["attributes"]["result"]["stdout"] == f"hello world; id > {planted}\n"
    assert not planted.exists()


async def test_a_shell_steps_input_is_echoed_not_run(
    address: str, tmp_path: Path, workers: list[Worker]
) -> None:
    """`shell echo hello ${input.who}` with `who = "world; id > FILE"`, through
    the step interpreter of a real decider and a real runner."""
    name, task_list = unique("shell-step"), unique("safety")
    definitions = tmp_path / "definitions"
    definitions.mkdir()
    (definitions / "flow.yaml").write_text(SHELL_STEP.format(name=name, task_list=task_list))
    decider = Worker(address, tmp_path, "decider", "decider", "--definitions", str(definitions))
    runner = Worker(
        address, tmp_path, "runner", "runner", "--task-list", task_list, "--allow-shell"
    )
    workers += [decider, runner]
    for worker in workers:
        await worker.logged("worker.started")
    await decider.logged("decider.registered")

    planted = tmp_path / "planted"
    given = json.dumps({"who": HOSTILE.format(file=planted)})
    workflow_id = ok_json(weft("start", name, "--input", given, "--json", address=address))[
        "workflow_id"
    ]
    close = await closed_run(address, workflow_id)
    assert close["type"] == "WorkflowSuccess", decider.log() + runner.log()
    assert close["attributes"]["result"] == f"hello world; id > {planted}\n"
    assert not planted.exists()


# -- http: off by default, an allow-list of hosts, private addresses only if listed ------


class Handler(BaseHTTPRequestHandler):
    """`/secret` answers; `/redirect?to=URL` sends the client on."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/redirect":
            self.send_response(302)
            self.send_header("Location", query.removeprefix("to="))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b'{"secret": "internal"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    """A web server on 127.0.0.1, in a thread: the internal service a step
    should not reach unless the runner's operator says so."""
    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def http_task(url: str) -> dict[str, Any]:
    return {"type": "weft.http", "input": {"url": url}}


def refused(close: dict[str, Any]) -> str:
    """The message of a run failed by `HttpNotAllowed` (so, not retried)."""
    assert close["type"] == "WorkflowFailed", close["logs"]
    assert close["attributes"]["reason"] == "HttpNotAllowed", close["attributes"]
    message: str = close["attributes"]["details"]["message"]
    assert "secret" not in json.dumps(close["attributes"])
    return message


async def test_http_is_off_without_allow_http(
    address: str, tmp_path: Path, workers: list[Worker], port: int
) -> None:
    close = await run_one(address, tmp_path, workers, http_task(f"http://127.0.0.1:{port}/"))
    assert "start it with `weft runner --allow-http HOST`" in refused(close)


async def test_http_refuses_a_host_not_listed(
    address: str, tmp_path: Path, workers: list[Worker], port: int
) -> None:
    url = f"http://127.0.0.1:{port}/"
    close = await run_one(address, tmp_path, workers, http_task(url), "--allow-http", "example.com")
    assert "127.0.0.1 is not one of the hosts this runner may reach" in refused(close)


async def test_any_public_host_still_refuses_a_loopback_address(
    address: str, tmp_path: Path, workers: list[Worker], port: int
) -> None:
    url = f"http://localhost:{port}/"
    close = await run_one(address, tmp_path, workers, http_task(url), "--allow-http", "*")
    assert "localhost resolves to 127.0.0.1, a private or special address" in refused(close)


async def test_http_reaches_a_listed_host(
    address: str, tmp_path: Path, workers: list[Worker], port: int
) -> None:
    url = f"http://127.0.0.1:{port}/"
    close = await run_one(address, tmp_path, workers, http_task(url), "--allow-http", "127.0.0.1")
    assert close["type"] == "WorkflowSuccess", close["logs"]
    assert close["attributes"]["result"]["content_json"] == {"secret": "internal"}


async def test_a_redirect_to_a_host_not_listed_is_refused(
    address: str, tmp_path: Path, workers: list[Worker], port: int
) -> None:
    url = f"http://127.0.0.1:{port}/redirect?to=http://localhost:{port}/"
    close = await run_one(address, tmp_path, workers, http_task(url), "--allow-http", "127.0.0.1")
    assert "localhost is not one of the hosts this runner may reach" in refused(close)


@pytest.mark.parametrize("host", ["http://x.example", "x.example:80", "x.example/a", "a b"])
def test_allow_http_takes_hosts_only(host: str, address: str) -> None:
    done = weft("runner", "--task-list", "tl", "--allow-http", host, address=address, timeout=30)
    line = error_line(done, "runner", 2)
    assert "--allow-http" in line and "is not a host name or address" in line, line

"""The CLI and the worker processes over mutual TLS: the order example end to
end (a decider and two runners, `weft start/signal/describe/history`), the
same settings through WEFT_TLS_* variables, and each wrong setting as one
readable line with exit 4 (unreachable)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.certs import Pki
from tests.cli.support import REPO, argv, clean_env, error_line, ok, ok_json
from tests.helpers import wait_until
from tests.serverproc import ServerProcess
from tests.workerproc import WorkerProcess


def tls_flags(pki: Pki, pair: str = "client") -> list[str]:
    chosen = getattr(pki, pair)
    return [
        "--tls-ca",
        str(pki.ca.path),
        "--tls-cert",
        str(chosen.cert),
        "--tls-key",
        str(chosen.key),
    ]


def weft(
    command: str, *args: str, address: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv(command, address, *args),
        capture_output=True,
        text=True,
        env={**clean_env(), **(env or {})},
        cwd=REPO,
        timeout=60,
    )


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    try:
        yield started
    finally:
        for worker in started:
            worker.stop()


async def test_the_order_example_over_mtls(
    mtls_server: ServerProcess, pki: Pki, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    address = mtls_server.address
    flags = tls_flags(pki)
    for kind, name, args in (
        ("decider", "decider", ["examples.order"]),
        ("runner", "runner-orders", ["--task-list", "orders", "examples.order"]),
        ("runner", "runner-pci", ["--task-list", "pci", "examples.order"]),
    ):
        workers.append(WorkerProcess(kind, [*flags, *args], address, tmp_path, name).start())

    async def registered() -> bool:
        for worker in workers:
            assert worker.running, worker.log_tail()
        return '"event": "decider.registered"' in workers[0].log() and all(
            '"event": "worker.started"' in w.log() for w in workers
        )

    await wait_until(registered, timeout=30)
    order = {"sku": "book", "quantity": 1, "amount": 3}
    out = ok(weft("start", *flags, "order", "--input", json.dumps(order), address=address))
    workflow_id = out.split()[1]
    signal = ["delivered", "--input", '{"to": "porch"}']
    ok(weft("signal", *flags, workflow_id, *signal, address=address))

    async def closed() -> dict[str, Any] | None:
        doc: dict[str, Any] = ok_json(
            weft("describe", *flags, workflow_id, "--json", address=address)
        )
        return doc if doc["status"] != "open" else None

    doc = await wait_until(closed, timeout=45, interval=0.25)
    assert doc is not None and doc["status"] == "completed", [w.log_tail() for w in workers]
    events = ok_json(weft("history", *flags, workflow_id, "--json", address=address))["events"]
    assert events[-1]["type"] == "WorkflowSuccess"
    assert events[-1]["attributes"]["result"]["charge"].startswith("CH-")
    identities = {e["attributes"].get("identity") for e in events if e["type"] == "ActivityStarted"}
    assert identities == {"runner-orders", "runner-pci"}


def test_the_variables_set_tls_for_every_command(mtls_server: ServerProcess, pki: Pki) -> None:
    env = {
        "WEFT_TLS_CA": str(pki.ca.path),
        "WEFT_TLS_CLIENT_CERT": str(pki.client.cert),
        "WEFT_TLS_CLIENT_KEY": str(pki.client.key),
        "WEFT_TLS_SERVER_NAME": "localhost",
    }
    ok_json(weft("list", "--json", address=mtls_server.address, env=env))


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ([], "the server speaks TLS on this port and this client connects in plaintext"),
        (["--tls"], "the server's certificate is not trusted"),
        (["--tls-ca", "CA"], "requires a client certificate"),
        ("foreign_client", "issued by commonName=other-ca"),
        ("expired_client", "expired on"),
    ],
    ids=["plaintext", "system-roots", "no-client-cert", "other-ca-cert", "expired-cert"],
)
def test_a_wrong_setting_is_one_line_and_exit_4(
    mtls_server: ServerProcess, pki: Pki, flags: list[str] | str, says: str
) -> None:
    if isinstance(flags, str):
        args = tls_flags(pki, flags)
    else:
        args = [str(pki.ca.path) if a == "CA" else a for a in flags]
    line = error_line(weft("list", *args, address=mtls_server.address), "list", 4)
    assert says in line, line
    assert mtls_server.address in line


@pytest.mark.parametrize(
    ("role", "args"),
    [("decider", ["examples.order"]), ("runner", ["--task-list", "orders", "examples.order"])],
)
def test_a_worker_with_a_refused_certificate_exits_at_once(
    mtls_server: ServerProcess, pki: Pki, role: str, args: list[str]
) -> None:
    """A worker waits out a server that is away, but not a TLS refusal at start:
    that is a setting to fix, said in one line (before, a runner polled into the
    refusal without end, a log line per poll each second)."""
    done = weft(role, *tls_flags(pki, "expired_client"), *args, address=mtls_server.address)
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr
    line = done.stderr.splitlines()[-1]  # after the process's own JSON log lines
    assert line.startswith(f"weft {role}: "), done.stderr
    assert "expired on" in line, line
    assert '"poll.' not in done.stderr  # it never polled


def test_a_certificate_without_its_key_is_a_usage_error(
    mtls_server: ServerProcess, pki: Pki
) -> None:
    done = weft("list", "--tls-cert", str(pki.client.cert), address=mtls_server.address)
    assert "go together" in error_line(done, "list", 2)
    missing = weft("list", "--tls-ca", "/nonexistent/ca.pem", address=mtls_server.address)
    assert "does not exist" in error_line(missing, "list", 2)


def test_no_tls_variables_leak_into_the_environment() -> None:
    assert not any(k.startswith("WEFT_TLS") for k in clean_env())
    assert os.environ.get("WEFT_TLS_CA") is None

"""Secure by default: `weft server` refuses plaintext on anything but loopback,
in one line with exit 2 and before touching the database, unless --insecure
(WEFT_INSECURE) is given or TLS is on. Loopback with no flags starts as ever."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from sdk.addresses import is_loopback
from tests.certs import Pki
from tests.cli.support import clean_env, error_line
from tests.e2e.security.conftest import good_tls, server_tls_args
from tests.serverproc import WEFT, ServerProcess, free_port


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:7400", True),
        ("127.3.2.1:7400", True),
        ("[::1]:7400", True),
        ("localhost:7400", True),
        ("unix:/tmp/weft.sock", True),
        ("0.0.0.0:7400", False),
        ("[::]:7400", False),
        (":7400", False),
        ("10.1.2.3:7400", False),
        ("weft.example.com:7400", False),
    ],
)
def test_what_counts_as_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def refused(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    """The process's end, killing it if it serves instead of exiting."""
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def server(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(WEFT), "server", "--db", f"sqlite:///{tmp_path / 'weft.db'}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean_env(), **(env or {})},
        start_new_session=True,
    )


@pytest.mark.parametrize(
    ("option", "address"),
    [
        ("--listen", "0.0.0.0:{port}"),
        ("--listen", "[::]:{port}"),
        ("--listen", "10.255.255.1:{port}"),
        ("--metrics-listen", "0.0.0.0:{port}"),
    ],
)
def test_plaintext_off_loopback_is_refused(tmp_path: Path, option: str, address: str) -> None:
    listen = address.format(port=free_port())
    done = refused(server(tmp_path, option, listen))
    line = error_line(done, "server", 2)
    assert f"refusing to start: {option} {listen} is not a loopback address" in line
    assert "TLS is required off loopback" in line and "--insecure" in line
    assert not (tmp_path / "weft.db").exists()  # refused before anything was opened


async def test_insecure_serves_plaintext_on_every_interface(tmp_path: Path) -> None:
    node = ServerProcess(f"sqlite:///{tmp_path / 'weft.db'}", tmp_path, name="insecure")
    node.extra_args = ("--listen", f"0.0.0.0:{node.port}", "--insecure")
    await node.start()  # the health check reaches it on 127.0.0.1
    try:
        assert '"listen": "0.0.0.0:' in node.log_path.read_text()
    finally:
        node.stop()


def test_weft_insecure_variable_does_the_same(tmp_path: Path) -> None:
    proc = server(tmp_path, "--listen", f"0.0.0.0:{free_port()}", env={"WEFT_INSECURE": "1"})
    try:
        deadline = time.monotonic() + 30
        assert proc.stderr is not None
        for line in proc.stderr:
            if '"server.started"' in line:
                break
            assert time.monotonic() < deadline and proc.poll() is None, line
        else:
            raise AssertionError(f"exited with {proc.wait()}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=30)


async def test_tls_serves_on_every_interface_without_insecure(tmp_path: Path, pki: Pki) -> None:
    node = ServerProcess(
        f"sqlite:///{tmp_path / 'weft.db'}", tmp_path, name="tls-any", tls=good_tls(pki)
    )
    node.extra_args = ("--listen", f"0.0.0.0:{node.port}", *server_tls_args(pki))
    await node.start()
    node.stop()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--tls-cert", "CERT"), "--tls-cert and --tls-key go together"),
        (("--tls-client-ca", "CA"), "--tls-client-ca needs --tls-cert and --tls-key"),
        (("--tls-cert", "/nonexistent.pem", "--tls-key", "KEY"), "does not exist"),
        (("--tls-cert", "CERT", "--tls-key", "OTHERKEY"), "cannot use the certificate"),
        # (before: OpenSSL's pass phrase prompt, on a terminal, twice)
        (("--tls-cert", "CERT", "--tls-key", "LOCKEDKEY"), "the key is encrypted"),
    ],
    ids=[
        "cert-without-key",
        "ca-without-cert",
        "missing-file",
        "key-of-another-cert",
        "encrypted-key",
    ],
)
def test_bad_tls_options_are_one_line(
    tmp_path: Path, pki: Pki, args: tuple[str, ...], says: str
) -> None:
    locked = tmp_path / "locked.key"
    key = serialization.load_pem_private_key(pki.server.key.read_bytes(), password=None)
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    files = {
        "CERT": str(pki.server.cert),
        "KEY": str(pki.server.key),
        "OTHERKEY": str(pki.client.key),
        "LOCKEDKEY": str(locked),
        "CA": str(pki.ca.path),
    }
    proc = server(
        tmp_path, "--listen", f"127.0.0.1:{free_port()}", *(files.get(a, a) for a in args)
    )
    out, err = proc.communicate(timeout=30)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    line = done.stderr.splitlines()[-1] if done.stderr else ""
    assert done.returncode == 2, done.stderr  # bad input (the same files in `weft ui`: 2)
    assert line.startswith("weft server: ") and says in line, done.stderr
    assert "Traceback" not in done.stderr

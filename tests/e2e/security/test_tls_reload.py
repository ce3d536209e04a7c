"""Certificates are reloaded while serving: new files are served to new
connections (gRPC and the metrics endpoint) while a call already open on the
old certificate finishes; SIGHUP reloads what the files' stat cannot show; a
bad pair keeps the old one serving. The metrics endpoint speaks mutual TLS."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from sdk.api.weft.v1 import service_pb2 as s
from sdk.client import POLL_TIMEOUT, AsyncClient
from tests.certs import Pair, Pki, issue
from tests.e2e.security.conftest import good_tls
from tests.helpers import wait_until
from tests.serverproc import ServerProcess, free_port

LONG_POLL = 6.0


def client_context(pki: Pki, *, with_cert: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca.path))
    if with_cert:
        context.load_cert_chain(str(pki.client.cert), str(pki.client.key))
    return context


def served_serial(port: int, pki: Pki) -> int:
    """The serial number of the certificate a new connection to the port gets."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        client_context(pki).wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        der = conn.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number


def serial(pair: Pair) -> int:
    return x509.load_pem_x509_certificate(pair.cert.read_bytes()).serial_number


def replace(src: Pair, dst: Pair) -> None:
    """Put new files in place as an operator (or cert-manager) does: write
    aside, then rename over the old ones."""
    for a, b in ((src.cert, dst.cert), (src.key, dst.key)):
        tmp = b.with_suffix(".new")
        shutil.copyfile(a, tmp)
        os.replace(tmp, b)


@pytest.fixture
def live(tmp_path: Path, pki: Pki) -> Iterator[tuple[ServerProcess, Pair, int]]:
    """A mTLS server on its own copy of the server files, with metrics."""
    files = Pair(tmp_path / "live.crt", tmp_path / "live.key")
    shutil.copyfile(pki.server.cert, files.cert)
    shutil.copyfile(pki.server.key, files.key)
    metrics = free_port()
    node = ServerProcess(
        f"sqlite:///{tmp_path / 'weft.db'}",
        tmp_path,
        name="reload",
        long_poll=f"{LONG_POLL}s",
        extra_args=(
            "--tls-cert",
            str(files.cert),
            "--tls-key",
            str(files.key),
            "--tls-client-ca",
            str(pki.ca.path),
            "--metrics-listen",
            f"127.0.0.1:{metrics}",
        ),
        tls=good_tls(pki),
    )
    try:
        asyncio.run(node.start())
        yield node, files, metrics
    finally:
        node.stop()


async def test_new_files_are_served_while_an_open_call_finishes(
    live: tuple[ServerProcess, Pair, int], pki: Pki, tmp_path: Path
) -> None:
    node, files, metrics = live
    assert served_serial(node.port, pki) == serial(pki.server)
    async with AsyncClient(node.address, tls=good_tls(pki)) as client:
        began = time.monotonic()
        request = s.PollForDecisionTaskRequest(namespace="default", task_list="reload-tl")
        poll = asyncio.create_task(client.rpc("PollForDecisionTask", request, timeout=POLL_TIMEOUT))
        await asyncio.sleep(1)  # the poll is waiting on the server now
        fresh = issue(pki.ca, tmp_path, "server-2", server=True)
        replace(fresh, files)

        async def served() -> bool:
            return await asyncio.to_thread(served_serial, node.port, pki) == serial(fresh)

        await wait_until(served, timeout=10, interval=0.2)
        assert not poll.done()  # still open on the old certificate's connection
        answer = await poll  # and it finishes as a long poll does: empty, no error
        assert answer.task_token == b""
        assert time.monotonic() - began >= LONG_POLL - 0.5
        # The same connection still serves calls after the reload.
        assert (await client.describe_namespace("default")).name == "default"

    async def metrics_served() -> bool:
        return await asyncio.to_thread(served_serial, metrics, pki) == serial(fresh)

    await wait_until(metrics_served, timeout=15, interval=0.5)
    assert '"event": "tls.reloaded"' in node.log_path.read_text()


def same_size_pair(pki: Pki, directory: Path, like: Pair) -> Pair:
    """A new certificate and key of exactly the sizes of `like`'s, so that
    writing them in place with the old mtime leaves the files' stat unchanged."""
    sizes = (like.cert.stat().st_size, like.key.stat().st_size)
    for attempt in range(200):
        # The same subject as the served one: only the serial, key and signature differ.
        (directory / str(attempt)).mkdir(parents=True)
        pair = issue(pki.ca, directory / str(attempt), "server", server=True)
        if (pair.cert.stat().st_size, pair.key.stat().st_size) == sizes:
            return pair
    raise AssertionError("no certificate of the same size in 200 tries")


def overwrite_unseen(src: Pair, dst: Pair) -> None:
    for a, b in ((src.cert, dst.cert), (src.key, dst.key)):
        st = b.stat()
        with b.open("r+b") as f:
            f.write(a.read_bytes())
        os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))


async def test_sighup_reloads_what_the_stat_cannot_show(
    live: tuple[ServerProcess, Pair, int], pki: Pki, tmp_path: Path
) -> None:
    node, files, _ = live
    fresh = same_size_pair(pki, tmp_path / "gen", files)
    overwrite_unseen(fresh, files)
    await asyncio.sleep(6)  # past the server's periodic look at the files
    assert served_serial(node.port, pki) == serial(pki.server)
    assert node.proc is not None
    node.proc.send_signal(signal.SIGHUP)

    async def served() -> bool:
        return await asyncio.to_thread(served_serial, node.port, pki) == serial(fresh)

    await wait_until(served, timeout=10, interval=0.2)
    assert node.proc.poll() is None  # SIGHUP reloads; it does not stop the server


async def test_a_key_that_does_not_fit_keeps_the_old_pair_serving(
    live: tuple[ServerProcess, Pair, int], pki: Pki, tmp_path: Path
) -> None:
    node, files, _ = live
    other = issue(pki.ca, tmp_path, "server-3", server=True)
    replace(Pair(other.cert, pki.client.key), files)  # a certificate with a foreign key

    async def logged() -> bool:
        return '"event": "tls.reload_failed"' in node.log_path.read_text()

    await asyncio.to_thread(served_serial, node.port, pki)  # a handshake looks at the files
    await wait_until(logged, timeout=10, interval=0.2)
    assert served_serial(node.port, pki) == serial(pki.server)
    async with AsyncClient(node.address, tls=good_tls(pki)) as client:
        assert (await client.describe_namespace("default")).name == "default"
    replace(other, files)  # the right key arrives: served from then on

    async def served() -> bool:
        return await asyncio.to_thread(served_serial, node.port, pki) == serial(other)

    await wait_until(served, timeout=10, interval=0.2)


def test_metrics_speak_mutual_tls(live: tuple[ServerProcess, Pair, int], pki: Pki) -> None:
    _, _, port = live
    url = f"https://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, context=client_context(pki), timeout=10) as resp:
        assert b"weft_events_appended_total" in resp.read()
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        urllib.request.urlopen(url, context=client_context(pki, with_cert=False), timeout=10).read()
    with pytest.raises((ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()

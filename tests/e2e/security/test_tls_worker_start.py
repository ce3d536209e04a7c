"""A worker that starts while its TLS server only closes connections (the
server restarting, say) keeps asking, and joins once the server serves; one
that keeps meeting closed connections ends, saying so in one line."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.certs import Pki
from tests.cli.support import REPO, argv, clean_env, ok_json
from tests.e2e.security.test_tls_cli import tls_flags
from tests.serverproc import ServerProcess


class Front:
    """A port that, while `closing`, completes the TLS handshake with the
    server's certificate and then closes the connection; otherwise relays the
    bytes to `upstream` (the real server, TLS end to end)."""

    def __init__(self, pki: Pki, upstream: tuple[str, int]) -> None:
        self.closing = True
        self._upstream = upstream
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._tls.load_cert_chain(str(pki.server.cert), str(pki.server.key))
        self._tls.set_alpn_protocols(["h2"])
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            target = self._close_after_handshake if self.closing else self._relay
            threading.Thread(target=target, args=(conn,), daemon=True).start()

    def _close_after_handshake(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            with self._tls.wrap_socket(conn, server_side=True):
                pass
        except OSError:
            conn.close()

    def _relay(self, conn: socket.socket) -> None:
        upstream = socket.create_connection(self._upstream)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    s.close()

        threading.Thread(target=pump, args=(upstream, conn), daemon=True).start()
        pump(conn, upstream)

    def close(self) -> None:
        self._listener.close()


@contextmanager
def front(pki: Pki, server: ServerProcess) -> Iterator[Front]:
    host, _, port = server.address.rpartition(":")
    relay = Front(pki, (host, int(port)))
    try:
        yield relay
    finally:
        relay.close()


def _runner(pki: Pki, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv("runner", f"127.0.0.1:{port}", *tls_flags(pki), "--task-list", "t1", "examples.order"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        cwd=REPO,
    )


def _listed(pki: Pki, server: ServerProcess) -> list[dict[str, object]]:
    workers = ok_json(
        subprocess.run(
            argv("workers", server.address, *tls_flags(pki), "--json"),
            capture_output=True,
            text=True,
            env=clean_env(),
            cwd=REPO,
            timeout=30,
        )
    )
    assert isinstance(workers, list)
    return [w for w in workers if "t1" in json.dumps(w)]


def test_a_worker_waits_out_a_server_that_closes_after_the_handshake(
    mtls_server: ServerProcess, pki: Pki
) -> None:
    with front(pki, mtls_server) as relay:
        proc = _runner(pki, relay.port)
        try:
            time.sleep(3)  # a few closed connections, each diagnosed
            assert proc.poll() is None, proc.communicate()[1]
            relay.closing = False
            deadline = time.monotonic() + 30
            while not _listed(pki, mtls_server):
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "the runner never joined"
                time.sleep(0.3)
        finally:
            proc.terminate()
            _, stderr = proc.communicate(timeout=30)
    assert "worker.tls_unclear" in stderr, stderr
    assert "worker.refused" not in stderr, stderr
    assert "Traceback" not in stderr


def test_a_worker_that_only_meets_closed_connections_ends_in_one_line(
    mtls_server: ServerProcess, pki: Pki
) -> None:
    with front(pki, mtls_server) as relay:
        began = time.monotonic()
        proc = _runner(pki, relay.port)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 4, stderr
    assert time.monotonic() - began >= 9  # asked again for TLS_RECHECK_WITHIN first
    line = stderr.splitlines()[-1]
    assert line.startswith("weft runner: "), stderr
    assert "closed the connection after the TLS handshake" in line, line
    assert "Traceback" not in stderr

"""A worker that starts while its TLS server only closes connections (the
server restarting, say) keeps asking, and joins once the server serves; one
that keeps meeting closed connections ends, saying so in one line."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest

from tests.certs import Pki
from tests.cli.support import REPO, argv, clean_env, ok_json
from tests.e2e.security.test_tls_cli import tls_flags
from tests.helpers import unique
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
        # Every socket and thread is kept so that close() ends them all: a
        # thread left running would raise into whichever test runs next.
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._start(self._accept)

    def _start(self, target: Callable[..., None], *args: object) -> None:
        """Run `target` in a thread close() joins; none once closing (its
        sockets are ended already)."""
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            if self._closed:
                return
            self._threads.append(thread)
            thread.start()

    def _keep(self, sock: socket.socket) -> bool:
        """Track `sock` for close(); False (and `sock` closed) once closing."""
        with self._lock:
            if not self._closed:
                self._sockets.append(sock)
                return True
        sock.close()
        return False

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            if self._keep(conn):
                self._start(self._close_after_handshake if self.closing else self._relay, conn)

    def _close_after_handshake(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5)  # (raises if close() ended it already)
            with self._tls.wrap_socket(conn, server_side=True):
                pass
        except OSError:
            conn.close()

    def _relay(self, conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self._upstream, timeout=5)
        except OSError:
            conn.close()  # the server is gone (the test is ending)
            return
        upstream.settimeout(None)
        if not self._keep(upstream):
            conn.close()
            return

        def pump(src: socket.socket, dst: socket.socket) -> None:
            with suppress(OSError):
                while data := src.recv(65536):
                    dst.sendall(data)
            for s in (src, dst):
                _end(s)  # the shutdown wakes the other pump's recv()

        self._start(pump, upstream, conn)
        pump(conn, upstream)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        _end(self._listener)
        for sock in sockets:
            _end(sock)
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=10)
        assert not [t for t in threads if t.is_alive()], "a front thread outlived close()"


def _end(sock: socket.socket) -> None:
    """Close `sock` so that a thread blocked on it returns: close() alone
    leaves a blocked accept() or recv() waiting."""
    with suppress(OSError):  # not connected any more
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@contextmanager
def front(pki: Pki, server: ServerProcess) -> Iterator[Front]:
    host, _, port = server.address.rpartition(":")
    relay = Front(pki, (host, int(port)))
    try:
        yield relay
    finally:
        relay.close()


def _worker(pki: Pki, port: int, role: str, task_list: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv(
            role, f"127.0.0.1:{port}", *tls_flags(pki), "--task-list", task_list, "examples.order"
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        cwd=REPO,
    )


def _listed(pki: Pki, server: ServerProcess, task_list: str) -> list[dict[str, object]]:
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
    return [w for w in workers if any(t["name"] == task_list for t in w["task_lists"])]


@pytest.mark.parametrize("role", ["runner", "decider"])
def test_a_worker_waits_out_a_server_that_closes_after_the_handshake(
    mtls_server: ServerProcess, pki: Pki, role: str
) -> None:
    """A decider meets it first in its registrations, a runner in its session."""
    task_list = unique("tls-start")
    with front(pki, mtls_server) as relay:
        proc = _worker(pki, relay.port, role, task_list)
        lines: list[str] = []
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 30
            while not any("worker.tls_unclear" in line for line in lines):
                assert proc.poll() is None, "".join(lines)
                assert time.monotonic() < deadline, "no closed connection was met"
                time.sleep(0.1)
            relay.closing = False
            while not _listed(pki, mtls_server, task_list):
                assert proc.poll() is None, "".join(lines)
                assert time.monotonic() < deadline + 30, "the worker never joined"
                time.sleep(0.3)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            reader.join(timeout=10)
            proc.stderr.close()
    stderr = "".join(lines)
    assert "worker.refused" not in stderr, stderr
    assert "Traceback" not in stderr


def test_a_worker_that_only_meets_closed_connections_ends_in_one_line(
    mtls_server: ServerProcess, pki: Pki
) -> None:
    with front(pki, mtls_server) as relay:
        began = time.monotonic()
        proc = _worker(pki, relay.port, "runner", unique("tls-start"))
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 4, stderr
    assert time.monotonic() - began >= 9  # asked again for TLS_RECHECK_WITHIN first
    line = stderr.splitlines()[-1]
    assert line.startswith("weft runner: "), stderr
    assert "closed the connection after the TLS handshake" in line, line
    assert "Traceback" not in stderr

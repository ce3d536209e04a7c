"""The server's TLS certificate, key and client CA, reloaded while serving.

gRPC asks `ServerTls.fetch` at every new connection's handshake whether the
certificate changed (`grpc.dynamic_ssl_server_credentials`); it answers from
the files' stat signature, so replacing the files is enough, and SIGHUP forces a
reload. Connections already open keep the certificate they shook hands with,
so in-flight calls are never dropped. New files are checked (the key matches
the certificate, the PEM parses) before they are served: a half-written pair
or a bad file keeps the old one serving and is logged, and tried again when the
files change once more.
"""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import structlog

log = structlog.get_logger("weft.tls")

# (mtime_ns, size, inode) of each file: a rename over the file (the usual
# atomic replace) changes the inode, an in-place write the mtime or size.
Signature = tuple[tuple[int, int, int], ...]


class TlsFilesError(ValueError):
    """The certificate, key or client CA cannot be read or do not fit together."""


@dataclass(frozen=True)
class TlsFiles:
    cert: str
    key: str
    client_ca: str = ""

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.cert, self.key, self.client_ca) if self.client_ca else (self.cert, self.key)


@dataclass(frozen=True)
class _Loaded:
    signature: Signature
    cert: bytes
    key: bytes
    client_ca: bytes | None

    def grpc_config(self) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration(
            [(self.key, self.cert)], root_certificates=self.client_ca
        )


class ServerTls:
    """The files of one server; raises TlsFilesError at construction if they
    cannot be served."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._current = _load(files)
        self._pending: _Loaded | None = None
        self._failed: Signature | None = None
        self._listeners: list[Callable[[TlsFiles], None]] = []
        self.reloads = 0

    @property
    def mutual(self) -> bool:
        """Client certificates are required and verified against the client CA."""
        return bool(self.files.client_ca)

    def credentials(self) -> grpc.ServerCredentials:
        # types-grpcio says the fetcher may not return None; gRPC's documentation
        # says None means "no change", which is what it is for.
        return grpc.dynamic_ssl_server_credentials(
            self._current.grpc_config(),
            self.fetch,  # type: ignore[arg-type]
            require_client_authentication=self.mutual,
        )

    def on_reload(self, listener: Callable[[TlsFiles], None]) -> None:
        """Call `listener` after each reload (the metrics endpoint's own context)."""
        self._listeners.append(listener)

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's question at each handshake: a new configuration, or None for
        no change. Never raises: gRPC would fail the handshake."""
        try:
            self.check()
            with self._lock:
                pending, self._pending = self._pending, None
            return pending.grpc_config() if pending is not None else None
        except Exception as exc:  # keep serving the certificate we have
            log.warning("tls.fetch_failed", error=str(exc)[:200])
            return None

    def check(self, force: bool = False) -> bool:
        """Load the files if they changed since the last load (or if forced,
        on SIGHUP); True when a new certificate is now served to new connections."""
        with self._lock:
            signature = _signature(self.files)
            if not force and signature in (self._current.signature, self._failed):
                return False
            try:
                loaded = _load(self.files)
            except TlsFilesError as exc:
                self._failed = signature
                log.warning("tls.reload_failed", error=str(exc), keeping="the previous files")
                return False
            self._current = self._pending = loaded
            self._failed = None
            self.reloads += 1
        log.info("tls.reloaded", cert=self.files.cert, client_ca=self.files.client_ca or None)
        for listener in self._listeners:
            try:
                listener(self.files)
            except (OSError, ssl.SSLError) as exc:
                log.warning("tls.reload_listener_failed", error=str(exc)[:200])
        return True


def _signature(files: TlsFiles) -> Signature:
    out = []
    for path in files.paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((-1, -1, -1))
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


def _load(files: TlsFiles) -> _Loaded:
    """Read and check the files. Read twice around the check, so what is served
    is exactly what was checked even when the files are being written."""
    signature = _signature(files)
    first = _read_all(files)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load_chain(context, files.cert, files.key)
    if files.client_ca:
        try:
            context.load_verify_locations(cafile=files.client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise TlsFilesError(
                f"cannot use the client CA {files.client_ca}: {_why(exc)}"
            ) from None
    if _read_all(files) != first:
        raise TlsFilesError("the TLS files changed while being loaded")
    cert, key, *rest = first
    return _Loaded(signature, cert, key, rest[0] if rest else None)


class _EncryptedKey(Exception):
    pass


def _no_password() -> str:
    # OpenSSL asks only for an encrypted key; unanswered, it would prompt on the
    # terminal (twice, then "Invalid argument"), or block on stdin mid-reload.
    raise _EncryptedKey


def load_chain(context: ssl.SSLContext, cert: str, key: str) -> None:
    """Load `cert` and `key` into `context`; TlsFilesError, saying which file is
    wrong and how, if they cannot be served (`weft server`, `weft ui`)."""
    try:
        context.load_cert_chain(cert, key, password=_no_password)
        return
    except _EncryptedKey:
        why = "the key is encrypted, and Weft takes no password: give it unencrypted"
    except ssl.SSLError as exc:
        why = _chain_why(exc, cert, key)
    except OSError as exc:
        why = exc.strerror or str(exc)
    raise TlsFilesError(f"cannot use the certificate {cert} with the key {key}: {why}")


def _chain_why(exc: ssl.SSLError, cert: str, key: str) -> str:
    if exc.reason == "KEY_VALUES_MISMATCH":
        return "the key is not the certificate's (KEY_VALUES_MISMATCH)"
    if exc.reason is not None and exc.reason != "PEM lib":
        return f"{exc.reason} ({exc.library or 'SSL'})"
    # OpenSSL says "PEM lib" of either file alike: read alone, as trusted
    # certificates are (the same parser), the certificate tells them apart.
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cafile=cert)
    except (ssl.SSLError, OSError):
        return f"{cert} holds no PEM certificate"
    return f"{key} holds no PEM private key"


def _read_all(files: TlsFiles) -> list[bytes]:
    out = []
    for path in files.paths:
        try:
            with open(path, "rb") as f:
                out.append(f.read())
        except OSError as exc:
            raise TlsFilesError(f"cannot read {path}: {exc.strerror or exc}") from None
    return out


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)

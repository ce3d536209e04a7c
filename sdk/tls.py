"""TLS for a client's connection: what to trust, what to show, and the error
a failed handshake becomes.

`AsyncClient(address, tls=TlsConfig(ca="ca.pem"))` verifies the server against
that CA; adding `cert=` and `key=` presents a client certificate (mutual TLS);
`server_name=` checks the server's certificate for another name than the one in
the address. `tls=True` is TLS against the system's root certificates.
"""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from sdk.errors import UnavailableError

# What gRPC's transport says (in an UNAVAILABLE status's details) when the
# connection was made and then failed: a TLS handshake gRPC saw fail, or a peer
# that closed the connection (a TLS server refusing a client certificate after
# a TLS 1.3 handshake, or a plaintext client talking to a TLS port, look the
# same to gRPC). "Connection refused" (no server) is not among them.
_SUSPECT_MARKERS = (
    "handshake",
    "verification",
    "ssl",
    "certificate",
    "socket closed",
    "connection reset",
    "end of file",
    "eof",
)
PROBE_TIMEOUT = 2.0
# What OpenSSL says when the other end answers a ClientHello with plaintext.
_NOT_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "PACKET_LENGTH_TOO_LONG"})
CONNECT_TIMEOUT_MS = 5000
# The client preface of HTTP/2: a gRPC server answers it with its SETTINGS.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class TlsError(UnavailableError):
    """The TLS handshake with the Weft server failed: check the CA, the client
    certificate and key, and the server name."""

    def __init__(self, message: str | None = None, *, certain: bool = True) -> None:
        super().__init__(message)
        self.certain = certain
        """False when all that was seen is the server closing the connection, at
        or after the handshake: a refused client certificate looks so, and so
        does a server that stops or restarts at that moment."""


@dataclass(frozen=True)
class TlsConfig:
    """How a client connects over TLS. Paths are PEM files, read when the
    connection is first made (so a client made anew picks up rotated files)."""

    ca: str | Path | None = None
    """CA certificate(s) to verify the server with; None: the system's roots."""
    cert: str | Path | None = None
    """This client's certificate chain, for servers that require one (mTLS)."""
    key: str | Path | None = None
    """The private key of `cert`."""
    server_name: str = ""
    """The name the server's certificate must carry, when the address does not
    (e.g. connecting by IP to a certificate issued for a DNS name)."""

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("TLS: a client certificate and its key go together; give both")

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials from the files; a missing or unreadable file
        raises TlsError naming it."""
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca, "CA certificate"),
            private_key=_read(self.key, "client key"),
            certificate_chain=_read(self.cert, "client certificate"),
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        if not self.server_name:
            return []
        return [("grpc.ssl_target_name_override", self.server_name)]


def tls_config(tls: TlsConfig | bool | None) -> TlsConfig | None:
    """What a client's `tls=` argument means: None/False plaintext, True the
    system's roots, or the given config."""
    if tls is True:
        return TlsConfig()
    if tls is None or tls is False:
        return None
    return tls


def open_channel(
    address: str, tls: TlsConfig | None, max_message: int, *, own_connection: bool
) -> grpc.aio.Channel:
    """A channel to `address`, plaintext or over `tls`; with `own_connection`, on
    a connection not shared with other channels to the address."""
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", max_message),
        ("grpc.max_send_message_length", max_message),
        ("grpc.use_local_subchannel_pool", 1 if own_connection else 0),
        # How long a connection may take to get the server's first HTTP/2 frame
        # (gRPC's own default is 20 s: a peer that accepts and says nothing held
        # a command that long). A server sends it at once, TLS included. (The
        # option's name is gRPC's: it is the connect timeout, not a backoff.)
        ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
    ]
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(
        address, tls.credentials(), options=options + tls.channel_options()
    )


def looks_like_tls(details: str) -> bool:
    """Whether an UNAVAILABLE status's details may hide a TLS problem (worth a probe)."""
    lowered = details.lower()
    return any(marker in lowered for marker in _SUSPECT_MARKERS)


def diagnose(address: str, tls: TlsConfig | None) -> TlsError | None:
    """Connect once with Python's own TLS (gRPC's errors say little) and tell
    what is wrong with this client's TLS settings for this server, if anything.
    None: TLS is not the problem (or the server cannot be reached at all).
    Blocking, at most a few seconds: called only after a failed call."""
    target = _host_port(address)
    if target is None:
        return None
    host, port = target
    try:
        context = _probe_context(tls)
    except TlsError as exc:
        return exc
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        return TlsError(f"TLS: cannot use the given certificate files: {exc}")
    try:
        raw = socket.create_connection((host, port), timeout=PROBE_TIMEOUT)
    except OSError:
        return None  # not reachable: not a TLS matter
    with raw:
        try:
            conn = context.wrap_socket(raw, server_hostname=(tls and tls.server_name) or host)
        except ssl.SSLCertVerificationError as exc:
            return TlsError(
                "TLS handshake failed: the server's certificate is not trusted"
                f" ({exc.verify_message}); give the CA that issued it"
                " (TlsConfig(ca=...), --tls-ca), or the name it carries (--tls-server-name)"
            )
        except ssl.SSLEOFError:  # closed during the handshake: as a reset, unclear
            if tls is None:
                return None
            return _refused_during(tls, "connection closed", certain=_cert_expired(tls))
        except ssl.SSLError as exc:
            if tls is None:
                return None  # a plaintext server: as this client expects
            if exc.reason in _NOT_TLS:
                return TlsError(
                    "this client connects over TLS and the server on this port does not"
                    " speak TLS (it serves plaintext)"
                )
            return _refused_during(tls, exc.reason or str(exc))
        except OSError:
            if tls is None:
                return None
            return _refused_during(tls, "connection closed", certain=_cert_expired(tls))
        with conn:
            if tls is None:
                return TlsError(
                    "the server speaks TLS on this port and this client connects in plaintext:"
                    " connect over TLS (TlsConfig(ca=...) or tls=True; --tls-ca or --tls)"
                )
            if _answers_http2(conn):
                return None
            return _refused_after(tls)


def _probe_context(tls: TlsConfig | None) -> ssl.SSLContext:
    if tls is None:
        # Only to learn whether the port speaks TLS at all.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        ca = _read(tls.ca, "CA certificate")
        context = ssl.create_default_context(cadata=ca.decode() if ca else None)
        if tls.cert is not None and tls.key is not None:
            context.load_cert_chain(str(tls.cert), str(tls.key))
    context.set_alpn_protocols(["h2"])
    return context


def _answers_http2(conn: ssl.SSLSocket) -> bool:
    """After the handshake: does the server talk (its HTTP/2 SETTINGS), or close?
    With TLS 1.3 a server checks the client's certificate after the client
    considers the handshake done, and closes the connection if it refuses it."""
    try:
        conn.settimeout(PROBE_TIMEOUT)
        conn.sendall(_H2_PREFACE)
        return bool(conn.recv(9))
    except TimeoutError:
        return True  # still open: it did not refuse us
    except (ssl.SSLError, OSError):
        return False


def _refused_during(tls: TlsConfig, reason: str, *, certain: bool = True) -> TlsError:
    return TlsError(f"TLS handshake failed ({reason}): {_client_cert_state(tls)}", certain=certain)


def _refused_after(tls: TlsConfig) -> TlsError:
    # Only a closed connection was seen: certain only if the certificate has
    # expired here, which no server takes.
    if tls.cert is None:
        return TlsError(
            "the server closed the connection after the TLS handshake: it requires a client"
            " certificate (TlsConfig(cert=..., key=...); --tls-cert and --tls-key)",
            certain=False,
        )
    return TlsError(
        "the server closed the connection after the TLS handshake, refusing the client"
        f" certificate: {_client_cert_state(tls)}",
        certain=_cert_expired(tls),
    )


def _cert_expired(tls: TlsConfig) -> bool:
    """Whether the client certificate has expired, as far as can be told here."""
    info = None if tls.cert is None else _decode_cert(str(tls.cert))
    return info is not None and _expired(str(info.get("notAfter", "")))


def _expired(not_after: str) -> bool:
    try:
        return ssl.cert_time_to_seconds(not_after) < time.time()
    except ValueError:
        return False


def _client_cert_state(tls: TlsConfig) -> str:
    """What can be told of the client certificate here, without the server's CA."""
    if tls.cert is None:
        return "no client certificate was given, and the server may require one"
    info = _decode_cert(str(tls.cert))
    if info is None:
        return f"the client certificate {tls.cert} may be expired or from a CA it does not trust"
    not_after = str(info.get("notAfter", ""))
    if _expired(not_after):
        return f"the client certificate {tls.cert} expired on {not_after}"
    issuer = ", ".join(f"{k}={v}" for rdn in info.get("issuer", ()) for k, v in rdn)
    return (
        f"the client certificate {tls.cert} has not expired; it is issued by"
        f" {issuer or 'an unnamed CA'}, which the server may not trust"
    )


def _decode_cert(path: str) -> dict[str, Any] | None:
    """The certificate's fields by the ssl module's decoder (what
    `getpeercert()` returns); None if it cannot be read here."""
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)
    if decode is None:
        return None
    try:
        info = decode(path)
    except (OSError, ssl.SSLError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of HOST:PORT or [V6]:PORT; None for gRPC target URIs."""
    if "://" in address or address.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return None
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _read(path: str | Path | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None

"""The server's configuration: built once by the CLI (flags, then WEFT_*
environment, then defaults) and passed down by constructor."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.engine.limits import Defaults, Limits
from sdk.addresses import is_loopback
from sdk.client import POLL_TIMEOUT

FOLDED_POLL = 1.0
"""Seconds a poll folded into a worker's answer waits for a task by default
(`ServiceSettings.folded_poll` says why so short)."""

LONG_POLL_MIN = 0.1
"""The shortest `--long-poll`: an idle worker's slot then asks again at most ten
times a second (with no wait at all it would ask without pause)."""

LONG_POLL_MAX = POLL_TIMEOUT.total_seconds() - 10.0
"""The longest `--long-poll`: an idle poll ends with an empty answer, with room
for the network, before the SDK's deadline for it (`sdk.client.POLL_TIMEOUT`).
Past that, every idle poll would end at the deadline instead (DEADLINE_EXCEEDED
in the worker, CANCELLED in the server's metrics), and a task handed over just
as the deadline fell would go with the cut call, started, until its timeout."""

DEFAULT_DB = "sqlite:///weft.db"
DEFAULT_LISTEN = "127.0.0.1:7400"


@dataclass(frozen=True)
class ServerConfig:
    db_url: str = DEFAULT_DB
    listen: str = DEFAULT_LISTEN
    metrics_listen: str = ""
    """HOST:PORT for Prometheus text exposition; empty: not served."""
    long_poll: float = 60.0
    folded_poll: float = FOLDED_POLL
    """How long a poll folded into a worker's answer waits for a task."""
    drain_grace: float = 10.0
    max_polls_per_client: int = 1000
    """Long polls one client (one host) may have waiting at once on this node."""
    purge_interval: float = 60.0
    """Seconds between retention passes (one node at a time on PostgreSQL); 0: never."""
    diagnose_interval: float = 60.0
    """Seconds between diagnoses of stuck runs for the `weft_stuck_findings` gauge; 0: never."""
    reuse_port: bool = False
    """Share the listening port with the other workers of `--workers N`."""
    port_processes: int = 1
    """How many processes serve the listening port (the N of `--workers N`):
    workers spread their poll connections over them."""
    limits: Limits = field(default_factory=Limits)
    defaults: Defaults = field(default_factory=Defaults)
    tls_cert: str = ""
    """PEM certificate chain served on --listen and --metrics-listen; empty: plaintext."""
    tls_key: str = ""
    tls_client_ca: str = ""
    """PEM CA(s) client certificates must be issued by; set: mutual TLS, required."""
    insecure: bool = False
    """Serve a non-loopback address without TLS or authentication anyway (`--insecure`)."""
    auth: bool = False
    """Every call needs an API key or a certificate principal (`--auth`)."""
    max_polls_per_principal: int = 1000
    """Long polls one authenticated principal may have waiting at once on this node."""
    max_requests_per_principal: float = 5000.0
    """Requests per second one authenticated principal may make to this node; 0: no limit."""
    node_name: str = ""
    """This node's stable name in `weft nodes`; empty: HOST:PORT (plus the index
    of a `--workers N` process)."""
    lease_period: float = 10.0
    """Seconds the upkeep leader's lease lasts; renewed every third of it. A dead
    leader is replaced within two periods."""
    worker_session_timeout: float = 10.0
    """A worker session's default timeout: its tasks time out as WORKER_LOST this
    long after its last heartbeat."""
    direct_lanes: bool = True
    """Offer direct lanes (`orchestrator.api.direct_lanes`) where they may be
    offered (`direct_lanes_host`); False: workers use gRPC lanes only."""

    def direct_lanes_host(self) -> str | None:
        """Where direct lanes listen, if this node offers them: only a node whose
        gRPC port is on loopback with neither TLS nor authentication, since a
        direct lane has neither (on the listen address's loopback family)."""
        if not self.direct_lanes or self.tls_cert or self.tls_client_ca or self.auth:
            return None
        if self.listen.startswith(("unix:", "unix-abstract:")) or not is_loopback(self.listen):
            return None
        host = self.listen.rpartition(":")[0].strip("[]")
        return "::1" if host == "::1" else "127.0.0.1"

    def insecure_reason(self) -> str | None:
        """Why this server must not start: a non-loopback listener without TLS,
        or without authentication (`--auth`, or client certificates required),
        and without `--insecure`. None when it may."""
        if self.insecure:
            return None
        exposed = [
            (option, address)
            for option, address in (
                ("--listen", self.listen),
                ("--metrics-listen", self.metrics_listen),
            )
            if address and not is_loopback(address)
        ]
        if not exposed:
            return None
        option, address = exposed[0]
        if not self.tls_cert:
            return (
                f"{option} {address} is not a loopback address and TLS is off:"
                " give --tls-cert and --tls-key (TLS is required off loopback),"
                " or --insecure to serve plaintext anyway"
            )
        if not (self.auth or self.tls_client_ca):
            return (
                f"{option} {address} is not a loopback address and authentication is off:"
                " give --auth (API keys, certificate principals) or --tls-client-ca,"
                " or --insecure to let anyone who reaches the port call"
            )
        return None

"""The UI process's one frozen configuration, built by `weft ui` from its flags."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from orchestrator.config import is_loopback
from sdk.client import DEFAULT_ADDRESS
from sdk.tls import TlsConfig


@dataclass(frozen=True)
class UiConfig:
    address: str = DEFAULT_ADDRESS
    """The Weft server the UI calls."""
    namespace: str = "default"
    """Where `/` leads; every page names its namespace in its URL."""
    listen: str = "127.0.0.1:7401"
    tls: TlsConfig | None = None
    """How the UI reaches the server (the client's --tls* options)."""
    api_key: str | None = None
    """Used for visitors who have not logged in (single-user use); None: they must log in
    when the server asks for credentials."""
    https_cert: str | None = None
    https_key: str | None = None
    """The UI's own HTTPS certificate and key (uvicorn serves HTTPS with them)."""
    insecure: bool = False
    """Listen on a non-loopback address over plain HTTP anyway."""
    session_idle: timedelta = timedelta(hours=8)
    """A login is forgotten after this long without a request."""
    max_sessions: int = 10_000
    history_cache_runs: int = 32
    """Closed runs whose whole history the UI keeps (a timeline redrawn, pages turned)."""
    history_cache_events: int = 200_000
    """...and at most this many events over all of them."""
    rpc_timeout: timedelta = timedelta(seconds=10)

    @property
    def https(self) -> bool:
        return bool(self.https_cert and self.https_key)

    def refusal(self) -> str | None:
        """Why this configuration must not start (secure by default), or None."""
        if bool(self.https_cert) != bool(self.https_key):
            return "--https-cert and --https-key go together; give both"
        if is_loopback(self.listen) or self.https or self.insecure:
            return None
        return (
            f"--listen {self.listen} is not a loopback address: give --https-cert and"
            " --https-key (HTTPS), or --insecure to serve plain HTTP to anyone who reaches it"
        )

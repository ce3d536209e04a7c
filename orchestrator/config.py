"""The server's configuration: built once by the CLI (flags, then WEFT_*
environment, then defaults) and passed down by constructor."""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.engine.limits import Defaults, Limits

DEFAULT_DB = "sqlite:///weft.db"
DEFAULT_LISTEN = "127.0.0.1:7400"


@dataclass(frozen=True)
class ServerConfig:
    db_url: str = DEFAULT_DB
    listen: str = DEFAULT_LISTEN
    metrics_listen: str = ""
    """HOST:PORT for Prometheus text exposition; empty: not served."""
    long_poll: float = 60.0
    drain_grace: float = 10.0
    max_polls_per_client: int = 1000
    """Long polls one client (one host) may have waiting at once on this node."""
    purge_interval: float = 60.0
    """Seconds between retention passes (one node at a time on PostgreSQL); 0: never."""
    limits: Limits = field(default_factory=Limits)
    defaults: Defaults = field(default_factory=Defaults)

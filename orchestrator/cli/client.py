"""The SDK client the commands use: short retries, so a missing server is
reported in a couple of seconds rather than waited for."""

from __future__ import annotations

from datetime import timedelta

from sdk.retry import RetryPolicy
from sdk.sync_client import Client

CLI_RETRY = RetryPolicy(give_up_after=timedelta(seconds=2))


def connect(address: str, namespace: str) -> Client:
    return Client(address, namespace=namespace, identity=f"weft-cli@{_host()}", retry=CLI_RETRY)


def _host() -> str:
    import socket

    return socket.gethostname()

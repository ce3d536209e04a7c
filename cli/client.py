"""The SDK client the commands use: short retries, so a missing server is
reported in a couple of seconds rather than waited for; TLS as the command's
--tls* options say."""

from __future__ import annotations

import socket
from datetime import timedelta

from cli.params import client_api_key, client_tls
from sdk.retry import RetryPolicy
from sdk.sync_client import Client

CLI_RETRY = RetryPolicy(give_up_after=timedelta(seconds=2))


def connect(address: str, namespace: str, identity: str = "") -> Client:
    identity = identity or f"weft-cli@{socket.gethostname()}"
    return Client(
        address,
        namespace=namespace,
        identity=identity,
        retry=CLI_RETRY,
        tls=client_tls(),
        api_key=client_api_key(),
    )

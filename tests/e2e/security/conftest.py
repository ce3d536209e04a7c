"""A PKI made by the test, and a real `weft server` process serving mutual TLS."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk.tls import TlsConfig
from tests.certs import Pki, make_pki
from tests.serverproc import ServerProcess


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def good_tls(pki: Pki) -> TlsConfig:
    return TlsConfig(ca=pki.ca.path, cert=pki.client.cert, key=pki.client.key)


def server_tls_args(pki: Pki, *, mutual: bool = True) -> tuple[str, ...]:
    args = ("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key))
    return (*args, "--tls-client-ca", str(pki.ca.path)) if mutual else args


@pytest.fixture(scope="module")
def mtls_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """`weft server` requiring client certificates issued by the test CA."""
    directory: Path = tmp_path_factory.mktemp("mtls-server")
    node = ServerProcess(
        f"sqlite:///{directory / 'weft.db'}",
        directory,
        name="mtls",
        extra_args=server_tls_args(pki),
        tls=good_tls(pki),
    )
    try:
        asyncio.run(node.start())
        yield node
    finally:
        node.stop()

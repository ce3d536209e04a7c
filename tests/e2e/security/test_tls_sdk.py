"""The SDK over TLS against a real `weft server --tls-cert … --tls-client-ca …`:
a client with the CA and a good certificate works (async, sync, and a fork);
every wrong setting fails at once with a TlsError saying what is wrong."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path

import pytest

from sdk.client import AsyncClient
from sdk.errors import UnavailableError
from sdk.retry import RetryPolicy
from sdk.sync_client import Client
from sdk.tls import TlsConfig, TlsError
from tests.certs import Pki
from tests.e2e.security.conftest import good_tls
from tests.serverproc import ServerProcess

# Long enough that a retried failure would show as slowness: a TLS refusal is not retried.
PATIENT = RetryPolicy(give_up_after=timedelta(seconds=30))


async def describe(address: str, tls: TlsConfig | bool | None) -> None:
    async with AsyncClient(address, tls=tls, retry=PATIENT) as client:
        await client.describe_namespace("default")


async def test_a_client_with_the_ca_and_a_good_certificate_works(
    mtls_server: ServerProcess, pki: Pki
) -> None:
    async with AsyncClient(mtls_server.address, tls=good_tls(pki)) as client:
        info = await client.describe_namespace("default")
        assert info.name == "default"
        # A fork dials its own connection with the same settings.
        twin = client.fork()
        try:
            assert twin.tls == client.tls
            assert (await twin.describe_namespace("default")).name == "default"
        finally:
            await twin.close()


def test_the_sync_client_takes_tls_too(mtls_server: ServerProcess, pki: Pki) -> None:
    with Client(mtls_server.address, tls=good_tls(pki)) as client:
        assert client.describe_namespace("default").name == "default"


def test_server_name_overrides_the_address_host(mtls_server: ServerProcess, pki: Pki) -> None:
    tls = TlsConfig(
        ca=pki.ca.path, cert=pki.client.cert, key=pki.client.key, server_name="localhost"
    )
    with Client(mtls_server.address, tls=tls) as client:
        assert client.describe_namespace("default").name == "default"
    wrong = TlsConfig(
        ca=pki.ca.path, cert=pki.client.cert, key=pki.client.key, server_name="elsewhere.example"
    )
    with pytest.raises(TlsError, match="not trusted"):
        asyncio.run(describe(mtls_server.address, wrong))


def _case(pki: Pki, name: str) -> TlsConfig | bool | None:
    return {
        "system-roots": True,
        "no-client-cert": TlsConfig(ca=pki.ca.path),
        "other-ca-cert": TlsConfig(
            ca=pki.ca.path, cert=pki.foreign_client.cert, key=pki.foreign_client.key
        ),
        "expired-cert": TlsConfig(
            ca=pki.ca.path, cert=pki.expired_client.cert, key=pki.expired_client.key
        ),
        "plaintext": None,
    }[name]


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("system-roots", "server's certificate is not trusted"),
        ("no-client-cert", "requires a client certificate"),
        ("other-ca-cert", "issued by commonName=other-ca, which the server may not trust"),
        ("expired-cert", "expired on"),
        ("plaintext", "the server speaks TLS on this port and this client connects in plaintext"),
    ],
)
async def test_a_wrong_setting_fails_at_once_saying_what_is_wrong(
    mtls_server: ServerProcess, pki: Pki, case: str, says: str
) -> None:
    began = time.monotonic()
    with pytest.raises(TlsError) as caught:
        await describe(mtls_server.address, _case(pki, case))
    assert says in caught.value.message, caught.value.message
    # Typed: a TlsError is an UnavailableError (the CLI's exit 4), not retried for 30 s.
    assert isinstance(caught.value, UnavailableError)
    assert time.monotonic() - began < 10


async def test_a_tls_client_against_a_plaintext_port(tmp_path: Path, pki: Pki) -> None:
    node = ServerProcess(f"sqlite:///{tmp_path / 'weft.db'}", tmp_path, name="plain")
    await node.start()
    try:
        with pytest.raises(TlsError, match="does not speak TLS"):
            await describe(node.address, good_tls(pki))
        await describe(node.address, None)  # and plaintext still works there
    finally:
        node.stop()


def test_a_certificate_without_its_key_is_refused() -> None:
    with pytest.raises(ValueError, match="give both"):
        TlsConfig(ca="ca.pem", cert="client.crt")


async def test_a_missing_file_is_named(mtls_server: ServerProcess, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(TlsError, match=f"cannot read the CA certificate {missing}"):
        await describe(mtls_server.address, TlsConfig(ca=missing))

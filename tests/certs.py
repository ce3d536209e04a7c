"""Certificates for the TLS tests, made by the test with `cryptography`: a CA,
server certificates for 127.0.0.1 and localhost, and client certificates good,
from another CA, and expired. Written as PEM files, as an operator would have."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NOW = dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    name: str
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    path: Path
    """The CA's certificate as a PEM file (what a client or server trusts)."""


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(directory: Path, name: str) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Authority(name, cert, key, path)


def issue(
    ca: Authority,
    directory: Path,
    name: str,
    *,
    server: bool,
    expired: bool = False,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
) -> Pair:
    """A leaf certificate signed by `ca`, with its key, as PEM files NAME.crt/NAME.key."""
    key = ec.generate_private_key(ec.SECP256R1())
    if expired:
        before, after = NOW - dt.timedelta(days=10), NOW - dt.timedelta(days=1)
    else:
        before, after = NOW - dt.timedelta(days=1), NOW + dt.timedelta(days=10)
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(before)
        .not_valid_after(after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca.key, hashes.SHA256())
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pair


@dataclass(frozen=True)
class Pki:
    """Everything the tests need, in one directory."""

    ca: Authority
    other_ca: Authority
    server: Pair
    client: Pair
    foreign_client: Pair
    expired_client: Pair


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = make_ca(directory, "weft-test-ca")
    other = make_ca(directory, "other-ca")
    return Pki(
        ca=ca,
        other_ca=other,
        server=issue(ca, directory, "server", server=True),
        client=issue(ca, directory, "client", server=False),
        foreign_client=issue(other, directory, "foreign-client", server=False),
        expired_client=issue(ca, directory, "expired-client", server=False, expired=True),
    )


def serial_of(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number

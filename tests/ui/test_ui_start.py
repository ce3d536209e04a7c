"""`weft ui` that cannot start says why in one line, and nothing of serving.

HTTPS files it cannot serve (exit 2) and an address it cannot listen on (exit
1), each the only line on stderr: not the warnings and notes of a start that
goes on, not OpenSSL's password prompt, not a C source line of `_ssl.c`. The
server it would talk to is never reached: nothing listens at its address.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from tests.certs import Pair, issue, make_ca
from tests.serverproc import WEFT, free_port


def weft_ui(*args: str) -> subprocess.CompletedProcess[str]:
    """`weft ui ARGS` to its end, without a terminal (start_new_session): an
    OpenSSL password prompt would wait on one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
    return subprocess.run(
        [str(WEFT), "ui", "--address", f"127.0.0.1:{free_port()}", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def one_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert done.stdout == "", done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("weft ui: ") and "serving" not in lines[0], lines
    return lines[0]


@pytest.fixture
def pair(tmp_path: Path) -> Pair:
    return issue(make_ca(tmp_path, "ui-ca"), tmp_path, "ui", server=True)


@pytest.fixture
def taken() -> Iterator[int]:
    """A port something else listens on, on every IPv4 address."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        yield sock.getsockname()[1]


def https(cert: Path, key: Path) -> tuple[str, ...]:
    return ("--https-cert", str(cert), "--https-key", str(key))


def test_files_that_are_not_pem_say_which(tmp_path: Path, pair: Pair) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    line = one_line(weft_ui(*https(junk, junk)), 2)
    assert line == (
        f"weft ui: cannot use the certificate {junk} with the key {junk}:"
        f" {junk} holds no PEM certificate"
    )
    line = one_line(weft_ui(*https(pair.cert, junk)), 2)
    assert line.endswith(f": {junk} holds no PEM private key")
    # The key given as the certificate (the two swapped).
    line = one_line(weft_ui(*https(pair.key, pair.cert)), 2)
    assert line.endswith(f": {pair.key} holds no PEM certificate")


def test_a_key_of_another_certificate(tmp_path: Path, pair: Pair) -> None:
    other = issue(make_ca(tmp_path, "other-ca"), tmp_path, "other", server=True)
    line = one_line(weft_ui(*https(pair.cert, other.key)), 2)
    assert line == (
        f"weft ui: cannot use the certificate {pair.cert} with the key {other.key}:"
        " the key is not the certificate's (KEY_VALUES_MISMATCH)"
    )


def test_an_encrypted_key_is_refused_without_a_prompt(tmp_path: Path, pair: Pair) -> None:
    key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    line = one_line(weft_ui(*https(pair.cert, encrypted)), 2)
    assert line.endswith(
        f"{encrypted}: the key is encrypted, and Weft takes no password: give it unencrypted"
    )


def test_bad_files_are_the_only_line_even_with_warnings_due(tmp_path: Path) -> None:
    # --insecure off loopback would warn first; the start does not go on.
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key\n")
    listen = f"0.0.0.0:{free_port()}"
    line = one_line(weft_ui("--listen", listen, "--insecure", *https(junk, junk)), 2)
    assert line.endswith(f": {junk} holds no PEM certificate")


def test_a_taken_port_is_the_only_line(taken: int) -> None:
    line = one_line(weft_ui("--listen", f"127.0.0.1:{taken}"), 1)
    assert line == f"weft ui: cannot listen on 127.0.0.1:{taken}: Address already in use"
    # Off loopback, where two warnings and a note would come first.
    line = one_line(weft_ui("--listen", f"0.0.0.0:{taken}", "--insecure"), 1)
    assert line == f"weft ui: cannot listen on 0.0.0.0:{taken}: Address already in use"


def test_a_host_that_does_not_resolve_is_said_as_the_resolver_says() -> None:
    listen = f"nowhere.invalid:{free_port()}"
    line = one_line(weft_ui("--listen", listen, "--insecure"), 1)
    assert line.startswith(f"weft ui: cannot listen on {listen}: ")
    assert "Unknown error" not in line, line  # (its errno is negative: not errno's)

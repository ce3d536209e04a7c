"""`weft ui` without a browser: secure by default, and a server that cannot be
reached said plainly on the page."""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from tests.serverproc import WEFT, free_port
from tests.ui.uiproc import UiProcess
from webui.auth import safe_next
from webui.config import UiConfig
from webui.sessions import SessionStore


def weft_ui(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")} | (env or {})
    return subprocess.run(
        [str(WEFT), "ui", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def test_a_non_loopback_listen_needs_https_or_insecure() -> None:
    refused = weft_ui("--listen", "0.0.0.0:7401")
    assert refused.returncode == 2
    assert "not a loopback address" in refused.stderr and "--insecure" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    half = weft_ui("--listen", "0.0.0.0:7401", "--https-cert", __file__)
    assert half.returncode == 2 and "--https-key" in half.stderr


def test_allowed_host_star_is_refused() -> None:
    refused = weft_ui("--allowed-host", "*")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "DNS-rebinding" in refused.stderr


def test_an_unreachable_server_is_said_on_the_page(tmp_path: Path) -> None:
    ui = UiProcess(f"127.0.0.1:{free_port()}", tmp_path).start()
    try:
        try:
            urllib.request.urlopen(ui.url + "/namespaces/default/runs", timeout=20)
            raise AssertionError("no error")
        except urllib.error.HTTPError as exc:
            assert exc.code == 503
            assert "UNAVAILABLE" in exc.read().decode()
    finally:
        ui.stop()


def test_redirects_after_login_stay_on_the_site() -> None:
    assert (
        safe_next("/namespaces/default/runs?status=open") == "/namespaces/default/runs?status=open"
    )
    for outside in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:x"):
        assert safe_next(outside) == "/"


def test_sessions_are_bounded_and_rotate() -> None:
    store = SessionStore(idle_seconds=3600, max_sessions=3)
    sessions = [store.new() for _ in range(5)]
    assert store.get(sessions[0].sid) is None and store.get(sessions[4].sid) is sessions[4]
    old = sessions[4]
    old.api_key = "weft.k_000000000000.secret"
    fresh = store.rotate(old)
    assert store.get(old.sid) is None and fresh.sid != old.sid and fresh.csrf != old.csrf
    assert fresh.api_key is None
    assert (
        fresh.check_csrf(fresh.csrf) and not fresh.check_csrf("") and not fresh.check_csrf(old.csrf)
    )


def test_https_with_a_secure_session_cookie(tmp_path: Path) -> None:
    from tests.certs import issue, make_ca

    ca = make_ca(tmp_path, "ui-ca")
    pair = issue(ca, tmp_path, "ui", server=True)
    ui = UiProcess(
        f"127.0.0.1:{free_port()}",
        tmp_path,
        extra_args=("--https-cert", str(pair.cert), "--https-key", str(pair.key)),
        https_ca=ca.path,
    ).start()
    try:
        with urllib.request.urlopen(
            ui.url + "/login", timeout=10, context=ui.ssl_context()
        ) as resp:
            cookie = resp.headers["Set-Cookie"]
            page = resp.read().decode()
        assert "weft_ui_session=" in cookie
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert "API key" in page
    finally:
        ui.stop()
    # With HTTPS, any address may be listened on; without, only loopback.
    assert UiConfig(listen="0.0.0.0:7401", https_cert="c", https_key="k").refusal() is None
    assert UiConfig(listen="0.0.0.0:7401", insecure=True).refusal() is None
    assert UiConfig(listen="[::1]:7401").refusal() is None
    assert UiConfig(listen="10.0.0.5:7401").refusal() is not None


def _https_args(tmp_path: Path) -> list[str]:
    from tests.certs import issue, make_ca

    pair = issue(make_ca(tmp_path, "ui-ca"), tmp_path, "ui", server=True)
    return ["--https-cert", str(pair.cert), "--https-key", str(pair.key)]


def test_off_loopback_no_key_serves_anonymous_visitors(tmp_path: Path) -> None:
    https = _https_args(tmp_path)
    refused = weft_ui(
        "--listen", f"0.0.0.0:{free_port()}", *https, "--api-key", "weft.k_000000000000.x"
    )
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "would act for every visitor" in refused.stderr
    # WEFT_API_KEY, which every client command reads, is the same key.
    env = {"WEFT_API_KEY": "weft.k_000000000000.x"}
    refused = weft_ui("--listen", f"0.0.0.0:{free_port()}", *https, env=env)
    assert refused.returncode == 2 and "WEFT_API_KEY" in refused.stderr
    # --insecure does not waive it, with HTTPS or without.
    for extra in (https, []):
        refused = weft_ui("--listen", f"0.0.0.0:{free_port()}", *extra, "--insecure", env=env)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
        assert "would act for every visitor" in refused.stderr
    assert UiConfig(listen="0.0.0.0:7401", insecure=True, api_key="k").refusal() is not None


def test_insecure_warns_of_each_waiver() -> None:
    plain = UiConfig(listen="0.0.0.0:7401", insecure=True).waivers()
    assert len(plain) == 2 and "plain HTTP" in plain[0] and "credentials" in plain[1]
    https = UiConfig(listen="0.0.0.0:7401", insecure=True, https_cert="c", https_key="k")
    assert len(https.waivers()) == 1 and "credentials" in https.waivers()[0]
    assert UiConfig(insecure=True).waivers() == []  # on loopback nothing is waived


def test_off_loopback_the_server_must_ask_for_credentials(tmp_path: Path) -> None:
    from tests.serverproc import ServerProcess
    from tests.ui.conftest import in_thread

    https = _https_args(tmp_path)
    server = ServerProcess(f"sqlite:///{tmp_path / 'weft.db'}", tmp_path)
    in_thread(server.start())
    try:
        listen = f"0.0.0.0:{free_port()}"
        refused = weft_ui("--address", server.address, "--listen", listen, *https)
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
        assert "answers calls without an API key" in refused.stderr
    finally:
        server.stop()
    # No server to ask: refused too (it cannot be known to be safe).
    gone = weft_ui("--address", server.address, "--listen", f"0.0.0.0:{free_port()}", *https)
    assert gone.returncode == 2 and "could not be asked" in gone.stderr


def test_insecure_and_listening_everywhere_are_said_at_start() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
    proc = subprocess.Popen(
        [str(WEFT), "ui", "--listen", f"0.0.0.0:{free_port()}", "--insecure"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("weft ui: serving"):
                break
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    warnings = [line for line in lines if "warning: --insecure" in line]
    assert len(warnings) == 2, lines
    assert "plain HTTP" in warnings[0] and "credentials" in warnings[1]
    assert any("must name an allowed host" in line for line in lines), lines


def test_https_files_it_cannot_serve_are_one_line_before_serving(tmp_path: Path) -> None:
    # Before, the UI said it was serving, then uvicorn's traceback (PEM lib).
    from tests.certs import issue, make_ca

    ca = make_ca(tmp_path, "ui-ca")
    pair, other = issue(ca, tmp_path, "ui", server=True), issue(ca, tmp_path, "x", server=True)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    nowhere = f"127.0.0.1:{free_port()}"
    for cert, key in ((junk, junk), (pair.cert, other.key)):
        done = weft_ui("--https-cert", str(cert), "--https-key", str(key), "--address", nowhere)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"weft ui: cannot use the certificate {cert} with the key {key}")


def test_a_taken_port_is_one_line_and_no_serving_said() -> None:
    # Before: "serving …" first, then uvicorn's own error line, and exit 3.
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        done = weft_ui("--listen", listen, "--address", f"127.0.0.1:{free_port()}")
    assert done.returncode == 1, done.stderr
    assert done.stderr == f"weft ui: cannot listen on {listen}: Address already in use\n"

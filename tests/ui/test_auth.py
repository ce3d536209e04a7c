"""The web UI against `weft server --auth`: a person logs in with their own API
key, sees what their role allows, and is refused (with the service's status and
message) what it does not; logging out forgets the key."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from sdk.sync_client import Client
from tests.serverproc import WEFT, ServerProcess
from tests.ui.conftest import in_thread, playwright_api, shot
from tests.ui.uiproc import UiProcess

expect = playwright_api().expect


@dataclass
class AuthStack:
    ui: UiProcess
    admin: Client
    reader_key: str
    workflow_id: str
    run_id: str


@pytest.fixture(scope="module")
def auth_stack(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthStack]:
    log_dir = tmp_path_factory.mktemp("ui-auth")
    db_url = f"sqlite:///{log_dir / 'weft.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEFT_")}
    boot = subprocess.run(
        [str(WEFT), "auth", "bootstrap", "--db", db_url],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert boot.returncode == 0, boot.stderr
    admin_key = boot.stdout.strip()
    server = ServerProcess(db_url, log_dir, name="auth", extra_args=("--auth",))
    in_thread(server.start())
    ui: UiProcess | None = None
    try:
        with Client(server.address, api_key=admin_key) as admin:
            _, reader_key = admin.create_api_key("reader", name="ui-reader")
            # No decider: the run stays open, as a run to look at and to try to end.
            run = admin.start_workflow(
                "audited",
                {"n": 1},
                workflow_id=f"audited-{uuid.uuid4().hex[:6]}",
                task_list="nobody",
            )
            ui = UiProcess(server.address, log_dir).start()
            yield AuthStack(ui, admin, reader_key, run.workflow_id, run.run_id)
    finally:
        if ui is not None:
            ui.stop()
        server.stop()


def test_login_then_a_reader_is_refused_terminate(auth_stack: AuthStack, page: Any) -> None:
    ui = auth_stack.ui
    page.goto(ui.url + "/namespaces/default/runs")
    # Nobody logged in and the UI has no key of its own: the login page.
    expect(page).to_have_url(re.compile(r"/login\?next="))
    expect(page.locator(".flash.error")).to_contain_text("UNAUTHENTICATED")
    page.fill('input[name="api_key"]', "weft.k_000000000000.not-a-key")
    page.click('button:has-text("Log in")')
    expect(page.locator(".error")).to_contain_text("UNAUTHENTICATED")
    shot(page, "login")

    page.fill('input[name="api_key"]', auth_stack.reader_key)
    page.click('button:has-text("Log in")')
    expect(page).to_have_url(re.compile(r"/namespaces/default/runs$"))
    expect(page.locator("tr.run", has_text=auth_stack.workflow_id)).to_be_visible()
    expect(page.locator(".who")).to_contain_text("k_")
    cookie = next(c for c in page.context.cookies() if c["name"] == "weft_ui_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert auth_stack.reader_key not in cookie["value"]

    page.goto(ui.url + f"/namespaces/default/runs/{auth_stack.workflow_id}/{auth_stack.run_id}")
    form = page.locator("#terminate-form")
    form.locator('input[name="reason"]').fill("a reader tries")
    form.locator("button").click()
    page.locator("#action-result button.confirm").click()
    refusal = page.locator("#action-result .outcome.refused")
    expect(refusal).to_contain_text("PERMISSION_DENIED")
    shot(page, "refused")
    assert auth_stack.admin.describe(auth_stack.workflow_id).status == "open"

    # Its decision task waits on a list no decider polls: the page says so.
    page.goto(ui.url + "/namespaces/default/task-lists")
    nobody = page.locator('tr.task-list[data-task-list="nobody"][data-kind="decision"]')
    expect(nobody).to_contain_text("no poller was seen")
    shot(page, "task-list-warning")

    page.click('button:has-text("Log out")')
    expect(page).to_have_url(re.compile(r"/login$"))
    page.goto(ui.url + "/namespaces/default/locks")
    expect(page).to_have_url(re.compile(r"/login\?next="))

    # The page asked for comes back after the login as it was written: an id
    # ending in "/." is one segment there, not a "." a browser would drop.
    odd = auth_stack.admin.start_workflow(
        "audited", {}, workflow_id=f"team-{uuid.uuid4().hex[:6]}/.", task_list="nobody"
    )
    asked = f"/namespaces/default/runs/{quote(odd.workflow_id, safe='')}/{odd.run_id}"
    page.goto(ui.url + asked)
    expect(page).to_have_url(re.compile(r"/login\?next="))
    page.fill('input[name="api_key"]', auth_stack.reader_key)
    page.click('button:has-text("Log in")')
    expect(page).to_have_url(re.compile(re.escape(asked) + "$"))
    expect(page.locator("h1.run-title")).to_contain_text(odd.workflow_id)


def test_off_loopback_in_front_of_a_server_that_asks_for_keys(
    auth_stack: AuthStack, tmp_path: Path
) -> None:
    """HTTPS, no key of its own, a server with --auth: `weft ui` serves any address."""
    import urllib.request

    from tests.certs import issue, make_ca

    ca = make_ca(tmp_path, "ui-ca")
    pair = issue(ca, tmp_path, "ui", server=True)
    ui = UiProcess(auth_stack.ui.server_address, tmp_path, https_ca=ca.path)
    ui.extra_args = (
        *("--listen", f"0.0.0.0:{ui.port}"),
        *("--https-cert", str(pair.cert), "--https-key", str(pair.key)),
    )
    ui.start()
    try:
        with urllib.request.urlopen(ui.url + "/login", timeout=10, context=ui.ssl_context()) as r:
            assert r.status == 200
    finally:
        ui.stop()

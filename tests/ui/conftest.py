"""The web UI's browser tests: a real `weft server`, real workers, `weft ui`, and
Debian's Chromium driven by Playwright (pointed at it with `executable_path`;
`scripts/install_browser.sh`, which `make test` runs, installs it). Where no
browser is there, every test here is skipped with one reason.

One stack (server, decider, runner, UI) serves the whole module: starting them
is most of the cost. Screenshots of each page go to tests/ui/artifacts/.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sdk.sync_client import Client
from tests.serverproc import ServerProcess
from tests.ui.uiproc import UiProcess
from tests.workerproc import WorkerProcess

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
TASK_LIST = "ui-steps"

WAIT_FLOW = f"""\
name: ui-wait
task_list: {TASK_LIST}
replayable: from start
steps:
  - let greeting = hello
  - id: wait_go
    step: wait signal go
  - id: finish
    step: return ${{output}}
"""

LOCKED_FLOW = f"""\
name: ui-locked
task_list: {TASK_LIST}
lock: ui-lock
steps:
  - id: hold
    step: wait signal release
  - return done
"""


REQUIRE_BROWSER = os.environ.get("WEFT_REQUIRE_BROWSER") == "1"


def playwright_api() -> Any:
    """`playwright.sync_api`, for a browser test module to import at its top: where
    Playwright is missing, the module is skipped with one reason (a failure under
    WEFT_REQUIRE_BROWSER=1), not a collection error."""
    try:
        from playwright import sync_api
    except ImportError:
        if REQUIRE_BROWSER:
            pytest.fail("playwright is not installed (WEFT_REQUIRE_BROWSER=1)", pytrace=False)
        pytest.skip(
            "playwright is not installed (pip install -e '.[dev]')", allow_module_level=True
        )
    return sync_api


def in_thread(coro: Any) -> Any:
    """Run a coroutine to its end on a loop of its own: Playwright's sync API keeps
    a loop running in the test's thread, so asyncio.run cannot be called there."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def chromium_path() -> str | None:
    found = os.environ.get("WEFT_CHROMIUM") or shutil.which("chromium")
    return found if found and os.access(found, os.X_OK) else None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one module: Playwright's sync API keeps an event loop running
    in this thread while it is open, which the async tests of other modules
    (pytest-asyncio's runners) must not find there."""
    path = chromium_path()
    if path is None:
        reason = (
            "no Chromium: run scripts/install_browser.sh (as root, with apt) to install"
            " Debian's chromium; the web UI's browser tests are skipped"
        )
        if REQUIRE_BROWSER:
            pytest.fail(reason + " (WEFT_REQUIRE_BROWSER=1)")
        pytest.skip(reason)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if REQUIRE_BROWSER:
            pytest.fail("playwright is not installed (WEFT_REQUIRE_BROWSER=1)")
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=path, args=["--disable-gpu"])
        yield chromium
        chromium.close()


@dataclass
class Stack:
    server: ServerProcess
    ui: UiProcess
    client: Client
    workers: list[WorkerProcess]


def _start_workers(address: str, log_dir: Path) -> list[WorkerProcess]:
    definitions = log_dir / "definitions"
    definitions.mkdir()
    (definitions / "wait.yaml").write_text(WAIT_FLOW)
    (definitions / "locked.yaml").write_text(LOCKED_FLOW)
    decider = WorkerProcess(
        "decider",
        ["--definitions", str(definitions), "examples.order"],
        address,
        log_dir,
        "decider",
    ).start()
    runner = WorkerProcess(
        "runner",
        ["--task-list", "orders", "--task-list", "pci", "examples.order"],
        address,
        log_dir,
        "runner",
    ).start()
    return [decider, runner]


@pytest.fixture(scope="module")
def stack(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    log_dir = tmp_path_factory.mktemp("ui-stack")
    server = ServerProcess(f"sqlite:///{log_dir / 'weft.db'}", log_dir, long_poll="2s")
    in_thread(server.start())
    workers: list[WorkerProcess] = []
    ui: UiProcess | None = None
    try:
        workers = _start_workers(server.address, log_dir)
        ui = UiProcess(server.address, log_dir).start()
        with Client(server.address) as client:
            yield Stack(server, ui, client, workers)
    finally:
        if ui is not None:
            ui.stop()
        for worker in workers:
            worker.stop()
        server.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    yield tab
    context.close()


def shot(page: Any, name: str) -> Path:
    """A screenshot of the page as a test artifact (the README's come from these)."""
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@dataclass
class PlainStack:
    """A server with no worker (every run stays open and takes signals) and `weft
    ui` in front of it: for the tests that need no browser."""

    server: ServerProcess
    ui: UiProcess
    client: Client


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlainStack]:
    log_dir = tmp_path_factory.mktemp("ui-plain")
    server = ServerProcess(f"sqlite:///{log_dir / 'weft.db'}", log_dir, long_poll="2s")
    in_thread(server.start())
    ui: UiProcess | None = None
    try:
        ui = UiProcess(server.address, log_dir).start()
        with Client(server.address) as client:
            yield PlainStack(server, ui, client)
    finally:
        if ui is not None:
            ui.stop()
        server.stop()

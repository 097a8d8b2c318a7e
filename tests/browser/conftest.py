"""Browser tests of the operator console: a real headless Chromium driven by Playwright.

They use the system's Chromium (Debian's `chromium`, or NOETL_TEST_CHROMIUM), never a
browser Playwright downloads. Without Chromium or Playwright they are skipped, or fail
under NOETL_TEST_REQUIRE_SERVICES=1 (CI installs both). Screenshots go to the directory
NOETL_TEST_ARTIFACTS names (one folder per test), else to the test's tmp dir.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from noetl import __version__
from noetl.runtime.orchestrator import Orchestrator
from noetl.server.app import create_app
from noetl.store import SqliteStore
from tests.conftest import services_missing
from tests.distributed.cluster import free_port, wait_until
from tests.helpers.auth import new_token

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.browser)


def chromium_path() -> str | None:
    configured = os.environ.get("NOETL_TEST_CHROMIUM")
    if configured:
        return configured if os.path.exists(configured) else None
    return shutil.which("chromium") or (
        "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium per test module. Not per session: Playwright's sync API runs
    an event loop in the main thread while it is open, and later tests that start one of
    their own (asyncio.run: the NATS session store) must not find it running."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        services_missing("Playwright for Python is not installed (pip install -e '.[dev]')")
    executable = chromium_path()
    if executable is None:
        services_missing("Chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def artifacts(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where this test's screenshots go."""
    root = os.environ.get("NOETL_TEST_ARTIFACTS")
    name = re.sub(r"[^\w.-]+", "_", request.node.name)
    path = Path(root) / name if root else tmp_path / "artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def page(browser: Any, artifacts: Path) -> Iterator[Any]:
    """A fresh page (own context: storage, cookies). An uncaught script error on it fails
    the test; a screenshot is kept when the test fails."""
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    context.set_default_timeout(15_000)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield opened
        assert errors == [], f"script errors on the page: {errors}"
    finally:
        try:
            opened.screenshot(path=str(artifacts / "last.png"), full_page=True)
        finally:
            context.close()


@dataclass
class LocalServer:
    """The API and the console in a thread (uvicorn), over a SQLite file, with the
    orchestrator loop running; no worker unless a test plays one."""

    url: str
    store: SqliteStore
    orchestrator: Orchestrator
    token: str  # an admin API token of its database


@pytest.fixture
def local_server(tmp_path: Path) -> Iterator[LocalServer]:
    import uvicorn

    store = SqliteStore(tmp_path / "console.db")
    orchestrator = Orchestrator(store, owner="console-test")
    app = create_app(store, orchestrator, version=__version__)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    stop = threading.Event()
    threads = [
        threading.Thread(target=server.run, daemon=True),
        threading.Thread(target=orchestrator.serve, args=(stop.is_set,), daemon=True),
    ]
    for thread in threads:
        thread.start()
    wait_until(lambda: server.started, 10, "the console server")
    try:
        yield LocalServer(f"http://127.0.0.1:{port}", store, orchestrator, new_token(store))
    finally:
        server.should_exit = True
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        store.close()


def shot(page: Any, artifacts: Path, name: str) -> Path:
    """Save a full-page screenshot named `name`."""
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def visit(page: Any, server: Any, path: str) -> None:
    """Open `path` of `server` (anything with `url` and `token`) signed in: the page starts
    with the server's token where the console keeps its credential, as after a login."""
    if getattr(page, "_noetl_token", None) != server.token:
        script = f"sessionStorage.setItem('noetl.api_token', {json.dumps(server.token)})"
        page.add_init_script(script)
        page._noetl_token = server.token
    page.goto(f"{server.url}{path}")

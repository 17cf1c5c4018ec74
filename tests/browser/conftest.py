"""The browser tier: Debian's Chromium, driven by Playwright for Python, against a real gateway on
the session's Ray Serve (one browser for the whole session, a fresh context per test).

A failed test leaves a screenshot of its page under ``var/test-artifacts/browser/`` (or
``$WONDER_TEST_ARTIFACTS/browser/``).
"""

from __future__ import annotations

import shutil
from collections.abc import Generator, Iterator

import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from tests.browser.console_page import Console, artifacts_dir
from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.conftest import embedder_app
from tests.integration.test_gateway import deploy_gateway

__all__ = ["embedder_app"]

FAILED = pytest.StashKey[bool]()
expect.set_options(timeout=60_000)  # a loaded machine: a turn may take its time


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        item.stash[FAILED] = True
    return report


# One browser per module, never per session: Playwright's sync API runs an event loop on this
# thread while it is open, and the async tests of the tiers that follow would find it running
# ("Runner.run() cannot be called from a running event loop").
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is not installed (make system-packages)"
    with sync_playwright() as playwright:
        # --no-sandbox: the tests may run as root, where Chromium's own sandbox cannot start.
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def client_key(ray_cluster: Cluster, gateway_url: str) -> tuple[str, str]:
    """A new client of the gateway: (client id, its admin-scope key)."""
    return make_client(ray_cluster.store, "console")


@pytest.fixture
def console(
    request: pytest.FixtureRequest, browser: Browser, gateway_url: str, client_key: tuple[str, str]
) -> Iterator[Console]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)  # a loaded machine: the turn loop may take its time
    page = context.new_page()
    console = Console(page, gateway_url, client_key[1])
    console.watch()
    try:
        yield console
        console.assert_key_kept_out_of_urls()
    finally:
        if request.node.stash.get(FAILED, False):
            out = artifacts_dir()
            out.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out / f"{request.node.name}.png"), full_page=True)
        context.close()

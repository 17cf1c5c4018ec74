"""Driving the web console in a real Chromium: a page that watches every URL it requests (the API
key must travel in none, and nothing may leave for another host), checks a view with axe-core,
and saves screenshots (for the docs, and of a failed test)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from playwright.sync_api import Page, WebSocket, expect

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
DOCS_IMAGES = ROOT / "docs" / "images" / "console"
BLOCKING = ("serious", "critical")

# The docs' screenshots are written when this is set (they change with every run's ids and times,
# so an ordinary run leaves the tree alone): WONDER_CONSOLE_SCREENSHOTS=1.
WRITE_DOCS_IMAGES = os.environ.get("WONDER_CONSOLE_SCREENSHOTS") == "1"


def artifacts_dir() -> Path:
    """Where a failed browser test leaves its screenshot (``var/`` is ignored by git)."""
    return (
        Path(os.environ.get("WONDER_TEST_ARTIFACTS", ROOT / "var" / "test-artifacts")) / "browser"
    )


@dataclass
class Console:
    page: Page
    base_url: str
    key: str
    requested: list[str] = field(default_factory=list)
    sockets: list[str] = field(default_factory=list)

    def watch(self) -> None:
        self.page.on("request", lambda request: self.requested.append(request.url))
        self.page.on("websocket", self._socket)

    def _socket(self, socket: WebSocket) -> None:
        self.sockets.append(socket.url)

    def open(self, route: str = "#/conversations") -> None:
        """Load the console, paste the key, go to ``route``."""
        self.page.goto(f"{self.base_url}/")
        self.page.get_by_label("API key", exact=True).fill(self.key)
        self.page.get_by_role("button", name="Use key").click()
        self.go(route)

    def go(self, route: str) -> None:
        self.page.evaluate("route => { location.hash = route; }", route)
        expect(self.page.locator("main")).to_have_attribute("data-route", route)
        expect(self.page.locator("main")).not_to_have_attribute("aria-busy", "true")

    def accessible(self, view: str) -> None:
        """axe-core over the page as it stands: no serious or critical violation."""
        if not self.page.evaluate("() => typeof window.axe === 'object'"):
            # Evaluated through the DevTools protocol: the console's CSP allows no injected script.
            self.page.evaluate(AXE.read_text(encoding="utf-8") + "\n;0")
        violations: list[dict[str, Any]] = self.page.evaluate(
            """async () => (await axe.run(document, {resultTypes: ['violations']})).violations
                 .map(v => ({id: v.id, impact: v.impact, help: v.help,
                             nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5)}))"""
        )
        blocking = [v for v in violations if v["impact"] in BLOCKING]
        assert not blocking, f"axe on the {view} view: {blocking}"

    def screenshot(self, name: str) -> None:
        """The view, checked for accessibility, then pictured for docs/console.md."""
        self.accessible(name)
        if WRITE_DOCS_IMAGES:
            DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(DOCS_IMAGES / f"{name}.png"), full_page=True)

    def assert_key_kept_out_of_urls(self) -> None:
        """The key is in no URL the page asked for, and every URL is the gateway's own."""
        host = urlsplit(self.base_url).netloc
        for url in self.requested + self.sockets:
            assert self.key not in url and quote(self.key, safe="") not in url, url
            assert urlsplit(url).netloc == host, f"the console reached another host: {url}"

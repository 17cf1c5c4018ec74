"""The web console's files as the gateway serves them (no Ray): every module the page imports is
served, with a Content-Security-Policy that allows only the gateway's own scripts and connections;
a name a client writes reaches no file outside the console's folder; nothing names another host.
The console itself runs in a real browser in tests/browser."""

from __future__ import annotations

import re

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from serving.gateway import console
from serving.gateway.errors import install_error_handlers


@pytest.fixture(scope="module")
def http() -> TestClient:
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(console.router)
    return TestClient(app)


def test_the_page_loads_only_the_gateways_own_files(http: TestClient) -> None:
    page = http.get("/")
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy
    assert "<script>" not in page.text  # no inline script: the policy would refuse it
    wanted = re.findall(r'(?:src|href)="(/console/[^"]+)"', page.text)
    assert wanted == ["/console/console.css", "/console/app.js"]
    for path in wanted:
        served = http.get(path)
        assert served.status_code == 200, path
        assert served.headers["x-content-type-options"] == "nosniff"


def test_every_module_import_is_served() -> None:
    for name, path in console.ASSETS.items():
        if not name.endswith(".js"):
            continue
        folder = name.rsplit("/", 1)[0] if "/" in name else ""
        for target in re.findall(r'from "(\.{1,2}/[^"]+)"', path.read_text(encoding="utf-8")):
            parts = [p for p in f"{folder}/{target}".split("/") if p not in ("", ".")]
            resolved: list[str] = []
            for part in parts:
                if part == "..":
                    resolved.pop()
                else:
                    resolved.append(part)
            assert "/".join(resolved) in console.ASSETS, f"{name} imports {target}"


def test_the_console_names_no_other_host() -> None:
    files = [console.CONSOLE_PAGE, *console.ASSETS.values()]
    for path in files:
        assert not re.search(r"(?:https?|wss?):/{2}", path.read_text(encoding="utf-8")), path


@pytest.mark.parametrize(
    "path",
    [
        "/console/../console.py",
        "/console/%2e%2e/console.py",
        "/console/views/../../index.html",
        "/console/..%2fconsole.py",
        "/console//etc/passwd",
        "/console/app.js.map",
        "/console/",
    ],
)
def test_a_name_outside_the_console_is_not_found(http: TestClient, path: str) -> None:
    response = http.get(path)
    assert response.status_code == 404
    assert "def " not in response.text and "root:" not in response.text

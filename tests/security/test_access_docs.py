"""``/docs`` on a real gateway names no other host: Swagger UI's files come from the gateway
itself (a Python package), so the page works offline and tells no CDN who reads it."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlparse

import httpx
import pytest

from tests.conftest import Cluster
from tests.integration.test_gateway import deploy_gateway

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


def test_the_docs_page_loads_everything_from_the_gateway(gateway_url: str) -> None:
    with httpx.Client(base_url=gateway_url, timeout=30, trust_env=False) as http:
        page = http.get("/docs")
        assert page.status_code == 200 and "SwaggerUIBundle" in page.text
        # Everything the page loads: src/href attributes, the OpenAPI url it hands Swagger UI.
        loads = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", page.text)
        loads += re.findall(r"""url:\s*["']([^"']+)["']""", page.text)
        assert len(loads) >= 4, page.text  # stylesheet, icon, script, the OpenAPI document
        ours = urlparse(gateway_url).netloc
        for found in loads:
            absolute = urljoin(gateway_url + "/docs", found)
            assert urlparse(absolute).netloc == ours, f"/docs loads {found} from another host"
            assert http.get(absolute).status_code == 200, found
        assert '"validatorUrl": null' in page.text  # Swagger UI's online validator: off
        # No URL of any host but ours anywhere in the page.
        assert re.findall(r"https?://", page.text) == [], page.text
        # The files are Swagger UI's own, in full, and nothing outside their folder is served.
        bundle = http.get("/docs/assets/swagger-ui-bundle.js")
        assert bundle.status_code == 200 and len(bundle.content) > 500_000
        assert http.get("/docs/assets/../__init__.py").status_code == 404
        assert http.get("/docs/assets/%2e%2e/__init__.py").status_code == 404
        assert http.get("/redoc").status_code == 404  # ReDoc loads from a CDN: not served

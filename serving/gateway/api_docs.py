"""``/docs``: the OpenAPI reference in Swagger UI, served whole by the gateway.

FastAPI's own page loads Swagger UI's script and stylesheet from a CDN; a deployment without
internet access (or one that should not tell a CDN who reads its docs) would get a blank page.
Here the page names only the gateway's own paths: ``/docs/assets/…`` serves the files of the
``swagger-ui-bundle-v2`` package (Swagger UI's release, installed with Wonder), and the online
validator (which Swagger UI would call) is off.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/assets"


def install(api: FastAPI) -> None:
    """Serve ``/docs`` and its assets on ``api`` (whose ``docs_url`` is None)."""
    api.mount(ASSETS_PATH, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @api.get(DOCS_PATH, include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=api.openapi_url or "/openapi.json",
            title=f"{api.title} API",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},
        )

"""Health check and the web console: a small app of plain ES modules and CSS (no build step) that
talks to the REST API and the WebSocket stream with the API key the user pastes in.

``/`` serves the console's page; ``/console/<file>`` its modules and stylesheet, looked up by name
in a table made once from ``static/console/`` (a path a client writes never reaches the disk). The
page loads nothing from another host, runs no inline script (its Content-Security-Policy says so)
and keeps the key out of every URL: requests carry it in a header, the stream opens with a
one-use ticket (docs/console.md).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import text

from core.errors import NotFound
from serving.gateway.auth import Context
from serving.gateway.protocol import Health

router = APIRouter()

STATIC = Path(__file__).with_name("static")
CONSOLE_PAGE = STATIC / "index.html"
ASSET_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}

CONSOLE_HEADERS = {
    # Own scripts, styles and connections only (the stream's ws: is the same host's).
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def console_assets(root: Path) -> dict[str, Path]:
    """Every servable file under ``root`` by its relative name (``views/chat.js``)."""
    return {
        path.relative_to(root).as_posix(): path
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.suffix in ASSET_TYPES
    }


ASSETS = console_assets(STATIC / "console")


@router.get("/healthz", response_model=Health, tags=["health"], summary="Liveness and store check")
def healthz(context: Context) -> Health:
    with context.store.db.connect() as conn:
        conn.execute(text("SELECT 1"))
    return Health()


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def console() -> HTMLResponse:
    return HTMLResponse(CONSOLE_PAGE.read_text(encoding="utf-8"), headers=CONSOLE_HEADERS)


@router.get("/console/{name:path}", include_in_schema=False)
def console_asset(name: str) -> Response:
    path = ASSETS.get(name)
    if path is None:
        raise NotFound(f"console file {name!r} not found")
    return Response(path.read_bytes(), media_type=ASSET_TYPES[path.suffix], headers=CONSOLE_HEADERS)

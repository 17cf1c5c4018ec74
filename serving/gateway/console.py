"""Health check and the minimal web console (a single static page that talks to the REST API and
the WebSocket stream with the API key the user pastes in)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from sqlalchemy import text

from serving.gateway.auth import Context
from serving.gateway.protocol import Health

router = APIRouter()

CONSOLE_PAGE = Path(__file__).with_name("static") / "console.html"


@router.get("/healthz", response_model=Health, tags=["health"], summary="Liveness and store check")
def healthz(context: Context) -> Health:
    with context.store.db.connect() as conn:
        conn.execute(text("SELECT 1"))
    return Health()


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def console() -> HTMLResponse:
    return HTMLResponse(CONSOLE_PAGE.read_text(encoding="utf-8"))

"""The gateway's HTTP API as the command line uses it: which gateway, which key, which user, and
what an API error means as an exit code.

The key comes from ``--api-key``, then ``WONDER_API_KEY`` (or ``WONDER_KEY``), then the key
``wonder up`` made; the URL from ``--url``, then the gateway settings; ``--user`` is sent as
``X-Wonder-User`` (the acting user of the client's app). Errors arrive as the API's one shape,
``{"error": {"code", "message", "retriable"}}``, and leave as one line and an exit code.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx
from pydantic import ValidationError

from cluster.cli.output import CliError, ExitCode, exit_code_for
from cluster.cli.state import gateway_url, remembered_key
from core.settings import Settings, load_settings

KEY_VARIABLES = ("WONDER_API_KEY", "WONDER_KEY")
USER_HEADER = "X-Wonder-User"
TIMEOUT_S = 30.0
# What an id on the command line may hold before it goes into a URL path: no "/", "%", "?" or
# "#" (another route), no "." or ".." segment.
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,199}")
NO_KEY = "no API key: pass --api-key, set WONDER_API_KEY, or run `wonder up` first"


def segment(value: str) -> str:
    """``value`` as one segment of a URL path, refused (exit 2) unless it is shaped like an id."""
    if not ID_PATTERN.fullmatch(value):
        raise CliError(f"{value!r} is not an id (letters, digits and _.:@+-)", ExitCode.USAGE)
    return value


def cli_settings() -> Settings:
    """The settings, or a ``CliError`` naming what is wrong with them."""
    try:
        return load_settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"WONDER_{'.'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise CliError(
            f"invalid settings: {problems} (see `wonder doctor`)", ExitCode.USAGE
        ) from None


def api_key(settings: Settings, given: str | None) -> str | None:
    """``--api-key``, else ``WONDER_API_KEY`` (or ``WONDER_KEY``), else the first client's key
    (made by ``wonder up``)."""
    if given:
        return given
    for variable in KEY_VARIABLES:
        if os.environ.get(variable):
            return os.environ[variable]
    return remembered_key(settings)


@dataclass(frozen=True)
class Target:
    """A gateway, the key to call it with, and the acting user (None: the client itself)."""

    url: str
    key: str
    user: str | None = None

    def headers(self) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.key}"}
        if self.user is not None:
            headers[USER_HEADER] = self.user
        return headers

    def websocket_url(self, path: str) -> str:
        base = self.url.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        return f"{base}{path}"


def target_of(args: argparse.Namespace) -> Target:
    """The gateway, key and user the command line names (``CliError`` without a key)."""
    settings = cli_settings()
    key = api_key(settings, getattr(args, "api_key", None))
    if not key:
        raise CliError(NO_KEY, ExitCode.REFUSED)
    url = (getattr(args, "url", None) or gateway_url(settings)).rstrip("/")
    return Target(url=url, key=key, user=getattr(args, "user", None))


class ApiError(CliError):
    """An error answer of the API: one line (its message, code and status) and an exit code."""

    def __init__(
        self,
        status: int,
        error_code: str,
        text: str,
        retriable: bool = False,
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        line = f"{text} ({error_code}, HTTP {status})"
        super().__init__(line, exit_code_for(status, error_code, retriable))
        self.status = status
        self.error_code = error_code
        self.text = text
        self.retriable = retriable
        self.details = details or []


def error_of(status: int, body: Any) -> ApiError:
    """The ``ApiError`` of a response's status and parsed body (any body: a proxy's page too)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        details = error.get("details") or body.get("details") or []
        return ApiError(
            status=status,
            error_code=str(error.get("code") or "ERROR"),
            text=error["message"],
            retriable=bool(error.get("retriable")),
            details=details if isinstance(details, list) else [],
        )
    reason = httpx.codes.get_reason_phrase(status) or "error"
    return ApiError(status=status, error_code="HTTP_ERROR", text=f"the gateway answered {reason}")


def unreachable(url: str, exc: Exception) -> CliError:
    return CliError(
        f"cannot reach the gateway at {url} ({type(exc).__name__}: {exc}); is Wonder up? "
        "(`wonder status`)",
        ExitCode.UNAVAILABLE,
    )


class ApiClient:
    """A synchronous client of the gateway: JSON in, JSON out, ``ApiError`` on an error answer."""

    def __init__(self, target: Target, timeout_s: float = TIMEOUT_S) -> None:
        self.target = target
        self.http = httpx.Client(
            base_url=target.url, headers=target.headers(), timeout=timeout_s, trust_env=False
        )

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | list[tuple[str, Any]] | None = None,
        body: Any = None,
    ) -> Any:
        try:
            response = self.http.request(method, path, params=params, json=body)
        except httpx.TimeoutException as exc:
            raise CliError(
                f"the gateway at {self.target.url} did not answer in time ({exc})",
                ExitCode.UNAVAILABLE,
            ) from None
        except httpx.TransportError as exc:
            raise unreachable(self.target.url, exc) from None
        if response.status_code >= 400:
            try:
                parsed = response.json()
            except ValueError:
                parsed = None
            raise error_of(response.status_code, parsed)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def get(self, path: str, params: dict[str, Any] | list[tuple[str, Any]] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body={} if body is None else body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)


def client_of(args: argparse.Namespace) -> ApiClient:
    return ApiClient(target_of(args))

"""A private git repository served over smart HTTP on 127.0.0.1: ``git http-backend`` behind a
small HTTP server of the test's own that asks every request for one ``Authorization`` header.

``GitHttpServer(root, authorization)`` serves the bare repositories under ``root`` at
``/<name>.git``. A request whose ``Authorization`` is not ``server.authorization`` gets a ``401``
(or ``server.refusal``) whose plain-text body echoes the header it got: a server that repeats
what it was sent (git shows that body to its user). ``server.redirect_to`` (a URL prefix) makes
every request a ``302`` to the same path there instead. Every request's method, path and
``Authorization`` are recorded, and ``server.on_request`` (if set) runs while the client that sent
it still waits.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

BACKEND_ENV = ("PATH", "LANG", "LC_ALL", "TMPDIR")


@dataclass(frozen=True)
class GitRequest:
    method: str
    path: str
    authorization: str | None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: GitHttpServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    @property
    def owner(self) -> GitHttpServer:
        server: Any = self.server
        return server.owner  # type: ignore[no-any-return]

    def log_message(self, *_args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        owner = self.owner
        given = self.headers.get("Authorization")
        owner.requests.append(GitRequest(self.command, self.path, given))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if owner.on_request is not None:
            owner.on_request()
        if owner.redirect_to is not None:
            self.send_response(302)
            self.send_header("Location", owner.redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if given != owner.authorization:
            echo = f"access denied for Authorization: {given}\n".encode()
            self.send_response(owner.refusal)
            self.send_header("WWW-Authenticate", 'Basic realm="private"')
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(echo)))
            self.end_headers()
            self.wfile.write(echo)
            return
        self._backend(body)

    def _backend(self, body: bytes) -> None:
        parts = urlsplit(self.path)
        env = {name: os.environ[name] for name in BACKEND_ENV if name in os.environ}
        env.update(
            {
                "GIT_PROJECT_ROOT": str(self.owner.root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "REMOTE_USER": "tester",  # an authenticated user may push (receive-pack)
                "REQUEST_METHOD": self.command,
                "PATH_INFO": parts.path,
                "QUERY_STRING": parts.query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            }
        )
        done = subprocess.run(
            ["git", "http-backend"], input=body, capture_output=True, env=env, check=False
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode().split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class GitHttpServer:
    """``with GitHttpServer(root, authorization) as server:`` serves on 127.0.0.1 in a thread."""

    def __init__(self, root: Path, authorization: str | None) -> None:
        self.root = root
        self.authorization = authorization
        self.redirect_to: str | None = None
        self.refusal = 401
        self.on_request: Callable[[], None] | None = None
        self.requests: list[GitRequest] = []
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.owner = self
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, name: str) -> str:
        return f"http://{self.host}/{name}.git"

    def authorizations(self) -> list[str | None]:
        return [request.authorization for request in self.requests]

    def __enter__(self) -> GitHttpServer:
        self.thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

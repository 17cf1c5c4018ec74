"""A listener on 127.0.0.1 that records every connection and request it gets: the destination a
test points the platform at, to prove what reaches it (a secret, a request) and what never does
(not even a connection).

Paths: ``/v1/chat/completions`` streams an OpenAI-compatible answer; ``/fail/v1/chat/completions``
answers 400 with a body holding ``LEAK_MARKER``; ``/big`` streams ``BIG_BYTES`` bytes;
``/redirect?to=URL`` answers 302 to URL; anything else answers ``{"ok": true}``.
"""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

LEAK_MARKER = "INTERNAL-ONLY-provider-text-7f3a"
ANSWER = "hello from the listener"
BIG_BYTES = 32 * 1024 * 1024


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Listener:
    host: str
    port: int
    connections: int = 0
    requests: list[Seen] = field(default_factory=list)
    big_sent: int = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    @property
    def listener(self) -> Listener:
        server: Any = self.server
        return server.listener  # type: ignore[no-any-return]

    def log_message(self, *_args: Any) -> None:
        pass

    def _record(self) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.listener.requests.append(Seen(self.command, self.path, headers))
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)

    def do_GET(self) -> None:
        self._record()
        self._answer()

    def do_POST(self) -> None:
        self._record()
        self._answer()

    def _answer(self) -> None:
        parts = urlsplit(self.path)
        if parts.path.endswith("/fail/v1/chat/completions"):
            self._send(400, json.dumps({"error": {"message": LEAK_MARKER, "code": 400}}))
        elif parts.path.endswith("/v1/chat/completions"):
            self._stream_answer()
        elif parts.path == "/big":
            self._stream_big()
        elif parts.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", parse_qs(parts.query)["to"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._send(200, json.dumps({"ok": True}))

    def _send(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream_answer(self) -> None:
        chunks = [
            {"choices": [{"index": 0, "delta": {"content": ANSWER}, "finish_reason": None}]},
            {
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 4},
            },
        ]
        body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream_big(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(BIG_BYTES))
        self.end_headers()
        chunk = b"x" * 65536
        try:
            for _ in range(BIG_BYTES // len(chunk)):
                self.wfile.write(chunk)
                self.listener.big_sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader stopped at its cap and closed the connection


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    listener: Listener

    def verify_request(self, request: Any, client_address: Any) -> bool:
        self.listener.connections += 1  # every accepted connection, before any byte is read
        return True


class Listening:
    """``with Listening(port) as listener:`` serves on 127.0.0.1:port in a thread."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        self.server = _Server((host, port), Handler)
        self.server.listener = Listener(host, int(self.server.server_address[1]))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Listener:
        self.thread.start()
        return self.server.listener

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def unused_port() -> int:
    """A loopback port nothing listens on (and no allow-list names)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

"""The guard the tests' Phoenix runs under (``tests/phoenix_guard``): a Python process started
with it reaches loopback and nothing else, and writes down what it refused.

Only refusals are exercised against outside addresses: the guard raises before the call, so no
packet leaves (192.0.2.1 is TEST-NET-1, ``example.invalid`` a reserved name).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.phoenix import GUARD

PROBE = """
import socket, sys
listener = socket.socket(); listener.bind(("127.0.0.1", 0)); listener.listen(1)
socket.create_connection(listener.getsockname(), timeout=5).close()  # loopback: allowed
socket.getaddrinfo("localhost", 80)
for attempt in (
    lambda: socket.socket().connect(("192.0.2.1", 80)),
    lambda: socket.getaddrinfo("example.invalid", 443),
    lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.1", 53)),
):
    try:
        attempt()
    except PermissionError as exc:
        print("refused:", exc)
    else:
        sys.exit("not refused")
"""


def test_the_guard_lets_loopback_through_and_refuses_anything_else(tmp_path: Path) -> None:
    log = tmp_path / "egress.log"
    env = {**os.environ, "PYTHONPATH": str(GUARD), "WONDER_PHOENIX_EGRESS_LOG": str(log)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("refused:") == 3
    lines = log.read_text().splitlines()
    assert lines == [
        "refused socket.connect '192.0.2.1'",
        "refused socket.getaddrinfo 'example.invalid'",
        "refused socket.sendto '192.0.2.1'",
    ]

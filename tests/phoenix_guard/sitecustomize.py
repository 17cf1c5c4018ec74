"""Loaded by the Phoenix server the tests start (this folder is first on its ``PYTHONPATH``):
an audit hook that lets its sockets reach loopback only.

Every ``connect``/``sendto`` and every name lookup is checked before it happens: a loopback
address (127.0.0.0/8, ::1), ``localhost`` or a Unix socket passes and is counted; anything else is
refused (``PermissionError``, before a packet leaves) and written to the file
``WONDER_PHOENIX_EGRESS_LOG`` names, which the tests read: an empty refusal list proves the server
tried no outside connection while they ran.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from typing import Any

LOG = os.environ.get("WONDER_PHOENIX_EGRESS_LOG", "")
EVENTS = {"socket.connect", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo"}
LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}


def _loopback(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    if host.lower() in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _target(event: str, args: tuple[Any, ...]) -> object:
    """The host the call would reach, or None for a Unix socket / no address."""
    if event == "socket.getaddrinfo":
        return args[0]
    address = args[1] if len(args) > 1 else None  # (socket, address)
    if isinstance(address, tuple) and address:
        return address[0]
    return None  # a Unix socket path, or a connected socket's send


def _refuse(event: str, host: object) -> None:
    if LOG:
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(f"refused {event} {host!r}\n")
    raise PermissionError(f"the test's Phoenix may reach loopback only, not {host!r}")


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in EVENTS:
        return
    host = _target(event, args)
    if host is None or _loopback(host):
        return
    _refuse(event, host)


if LOG:
    sys.addaudithook(_hook)

"""The Ray environment of every process Wonder starts: set before ``ray`` is first imported.

Ray reads some settings once, when it is first imported in a process (``RAY_AUTH_MODE`` among
them): a module that imports ``ray`` before they are set leaves that process unable to attach to
a token-auth head. ``cluster/__init__.py`` calls ``prepare()`` so importing any module of this
package, the ``wonder`` command's included, gives the process its Ray environment first; this
module imports no Ray itself. ``tests/unit/test_ray_environment.py`` checks that every entry
point and every module of the package sees it set when Ray is imported.
"""

from __future__ import annotations

import os

# Ray's own usage reporting stays off unless the environment asks for it (it would phone home).
DEFAULTS = {"RAY_USAGE_STATS_ENABLED": "0"}


def auth_mode() -> str:
    """The Ray auth mode to run with: the environment's explicit choice, else ``token``."""
    return os.environ.get("RAY_AUTH_MODE") or "token"


def prepare() -> None:
    """Give this process its Ray environment (idempotent; an explicit setting wins)."""
    os.environ["RAY_AUTH_MODE"] = auth_mode()
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)

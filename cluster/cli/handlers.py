"""Commands' handlers, named ``"module:function"`` and imported when they run.

The command line is declared without importing what runs it (``parser``), so ``wonder --help``
and the API commands stay free of Ray, Serve and vLLM; a handler's module is imported here, by
name, when its command runs.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

Handler = Callable[[argparse.Namespace], int]


def resolve(name: str) -> Callable[..., Any]:
    """The function ``"module:function"`` names (its module imported now)."""
    module_name, _, function_name = name.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module_name), function_name)
    return function

"""Functions named by module and attribute, imported in the process that calls them.

What a Ray task or actor is given travels pickled, and a function travels by reference: the process
that submits the task or creates the actor imports the function's module. A ``FunctionRef`` names
the function instead, so a heavy dependency is imported only where it runs: the executor's actions
(httpx, pyarrow, numpy) in task workers, the MCP client (about 2 s of imports) in the
``mcp-connections`` actor, never in the conversation actors that only reach them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class FunctionRef:
    """A module-level function named by its module and name, imported where it is resolved."""

    module: str
    name: str

    def resolve(self) -> Callable[..., Any]:
        function: Callable[..., Any] = getattr(importlib.import_module(self.module), self.name)
        return function

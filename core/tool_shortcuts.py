"""Tool shortcuts: a deterministic route to a tool for models that cannot choose one well.

A model too small to pick tools reliably (SmolLM2-135M answers "12*7" with "89" rather than
calling its calculator) still answers well once a tool's result is in front of it. A library tool
may therefore carry a ``shortcut``: a regular expression whose named groups are the tool's
arguments. In ``constrained`` tool calling, when the user's latest message matches a shortcut,
that tool is called with the groups as its arguments and the model's choice is skipped; the
arguments are validated against the tool's input schema like any other call.

Patterns come from library files and from clients (``PUT /v1/tools/{id}``), so they run on RE2:
linear time whatever the pattern and the input, never a backtracking blow-up.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import re2

MAX_PATTERN_CHARS = 500
# The user text a shortcut looks at: enough for any question a shortcut is meant for.
MAX_SUBJECT_CHARS = 2_000


class ShortcutError(ValueError):
    """A shortcut pattern that cannot be used; the message says why."""


@lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> Any:
    """The compiled pattern (RE2); ``ShortcutError`` when RE2 cannot compile it."""
    try:
        return re2.compile(pattern)
    except re2.error as exc:
        raise ShortcutError(f"shortcut pattern does not compile (RE2 syntax): {exc}") from None


def check_pattern(pattern: str, argument_names: Iterable[str]) -> None:
    """Raise ``ShortcutError`` unless ``pattern`` compiles and names only known arguments."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ShortcutError(f"shortcut pattern is longer than {MAX_PATTERN_CHARS} characters")
    groups = set(compile_pattern(pattern).groupindex)
    if not groups:
        raise ShortcutError("shortcut pattern has no named group (?P<argument>...)")
    unknown = sorted(groups - set(argument_names))
    if unknown:
        raise ShortcutError(f"shortcut pattern names arguments not in input_schema: {unknown}")


def shortcut_arguments(pattern: str, text: str) -> str | None:
    """The tool's arguments (JSON text) when ``text`` matches ``pattern``, else None."""
    found = compile_pattern(pattern).search(text[:MAX_SUBJECT_CHARS])
    if found is None:
        return None
    groups = {name: value.strip() for name, value in found.groupdict().items() if value}
    return json.dumps(groups) if groups else None

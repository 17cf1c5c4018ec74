"""The registry of library callables: the only Python a ``python`` task action may run.

A module marks its functions with ``@library_callable``; they are registered under
``"module:function"`` when the module is imported. Which modules are imported is configuration:
the shipped ones (``SHIPPED_MODULES``) plus the operator's ``WONDER_LIBRARY_CALLABLES`` — each entry
either a module (its decorated functions register) or ``"module:function"`` (that function
registers, decorated or not: how an operator admits code they did not write).

The gateway refuses a task naming anything else at ``PUT`` time (``unregistered_callables``), and
the executor looks callables up here at run time, so a client can never reach an internal entry
point (``jobs.cli:main``, store helpers) by naming it.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from core.errors import InvalidInput, NotFound

F = TypeVar("F", bound=Callable[..., Any])

# Modules of the shipped library (names, not imports: ``core`` imports no other package of ours).
# A module that cannot be imported here (an optional extra not installed) registers nothing.
SHIPPED_MODULES: tuple[str, ...] = (
    "library.callables",
    "library.adapters",
    "library.workflows.steps",
    "actors.actions.memory_actions",
)

MAX_CALLABLE_NAME_CHARS = 300

_registry: dict[str, Callable[..., Any]] = {}
_loaded: set[tuple[str, ...]] = set()
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class CallableInfo:
    """What the API lists about one registered callable."""

    name: str
    description: str
    is_async: bool


def callable_name(fn: Callable[..., Any]) -> str:
    """The name a task uses for ``fn``: ``"module:qualname"``."""
    return f"{fn.__module__}:{fn.__qualname__}"


def library_callable(fn: F) -> F:
    """Register ``fn`` for ``python`` task actions (``params.callable: "module:function"``)."""
    _registry[callable_name(fn)] = fn
    return fn


def register(name: str, fn: Callable[..., Any]) -> None:
    """Register ``fn`` under ``name`` explicitly (tests, operator-named functions)."""
    _registry[name] = fn


def load_callables(configured: Sequence[str] = ()) -> None:
    """Import the shipped modules and the operator's entries (once per distinct configuration).

    Raises:
        InvalidInput: an operator entry names a module or function that does not exist.
    """
    key = tuple(configured)
    if key in _loaded:
        return
    with _lock:
        if key in _loaded:
            return
        for module in SHIPPED_MODULES:
            try:
                importlib.import_module(module)
            except ImportError:
                continue
        for entry in configured:
            _load_entry(entry)
        _loaded.add(key)


def _load_entry(entry: str) -> None:
    module_name, _, attr = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(
            f"WONDER_LIBRARY_CALLABLES: cannot import {module_name!r}: {exc}"
        ) from exc
    if not attr:
        return
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise InvalidInput(f"WONDER_LIBRARY_CALLABLES: {entry!r} is not a function")
    _registry[entry] = fn


def registered(configured: Sequence[str] = ()) -> list[CallableInfo]:
    """Every registered callable, sorted by name."""
    load_callables(configured)
    return [
        CallableInfo(
            name=name,
            description=(inspect.getdoc(fn) or "").split("\n\n", 1)[0].replace("\n", " "),
            is_async=inspect.iscoroutinefunction(fn),
        )
        for name, fn in sorted(_registry.items())
    ]


def lookup(name: str, configured: Sequence[str] = ()) -> Callable[..., Any]:
    """The callable registered as ``name``.

    Raises:
        NotFound: nothing is registered under ``name``.
    """
    load_callables(configured)
    try:
        return _registry[name]
    except KeyError:
        raise NotFound(not_registered_message(name)) from None


def not_registered_message(name: str) -> str:
    shown = name if len(name) <= MAX_CALLABLE_NAME_CHARS else name[:MAX_CALLABLE_NAME_CHARS] + "…"
    return (
        f"callable {shown!r} is not registered for library use "
        "(see GET /v1/library/callables; operators add modules with WONDER_LIBRARY_CALLABLES)"
    )


def unregistered_callables(
    actions: Iterable[tuple[str, dict[str, Any]]], configured: Sequence[str] = ()
) -> list[str]:
    """Problems with the ``python`` actions among ``(kind, params)`` pairs, one line each."""
    load_callables(configured)
    problems = []
    for index, (kind, params) in enumerate(actions):
        if kind != "python":
            continue
        name = params.get("callable")
        if not isinstance(name, str) or not name:
            problems.append(f"actions.{index}.params.callable: a python action names a callable")
        elif name not in _registry:
            problems.append(f"actions.{index}.params.callable: {not_registered_message(name)}")
    return problems

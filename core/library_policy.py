"""What the operator allows in library objects, beyond their shape (docs/security.md).

- A task's ``python`` actions may name only registered callables (``core.callables``).
- A model profile may use the ``scripted`` provider (a test double that sleeps and emits tokens on
  demand) only where the operator turned test doubles on (``WONDER_ALLOW_TEST_DOUBLES``).

``policy_problems`` is checked when an object is stored (the gateway's ``PUT``, ``wonder library
apply``): a refused object is a 400 naming the field, never a failure at run time.
"""

from __future__ import annotations

from pydantic import BaseModel

from core.callables import unregistered_callables
from core.domain import ModelProfile, TaskDef
from core.settings import Settings

TEST_DOUBLES_OFF = (
    "provider: the 'scripted' provider is a test double and is disabled on this deployment "
    "(the operator enables it with WONDER_ALLOW_TEST_DOUBLES=true)"
)


def policy_problems(obj: BaseModel, settings: Settings) -> list[str]:
    """Why ``obj`` may not be stored under ``settings``, one line per problem (empty: allowed)."""
    if isinstance(obj, TaskDef):
        return unregistered_callables(
            ((a.kind, a.params) for a in obj.actions), settings.library_callables
        )
    if isinstance(obj, ModelProfile):
        return scripted_problems(obj, settings)
    return []


def scripted_problems(profile: ModelProfile, settings: Settings) -> list[str]:
    if profile.provider == "scripted" and not settings.allow_test_doubles:
        return [TEST_DOUBLES_OFF]
    return []

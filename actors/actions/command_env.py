"""The environment of a ``shell.exec`` command: ``env`` in the task's params, each variable a
string or a secret reference (``{"secret": "name", "prefix": ""}``), resolved in this process
right before the command runs and handed to the sandbox (``actors.workspace.sandbox``: through a
pipe, never in an argument vector). Only the stored task definition names variables and secrets:
a value filled in from the input cannot be a secret reference (``actors.executor``).
"""

from __future__ import annotations

import asyncio
import re

from pydantic import ValidationError

from actors.actions import ActionContext, JsonObject
from core.client_secrets import ENV_NAME_PATTERN, MAX_SECRET_BYTES, SecretRef
from core.errors import InvalidInput
from core.secret_vault import SecretVault

MAX_ENV_VARS = 16
MAX_ENV_BYTES = 48 * 1024  # the pipe bubblewrap reads them from holds 64 KiB
RESERVED_ENV = frozenset({"PATH", "HOME", "LANG", "TERM"})


def command_env_specs(params: JsonObject) -> dict[str, str | SecretRef]:
    """A command's ``env``: name → a string or a secret reference (checked, not resolved)."""
    raw = params.get("env") or {}
    if not isinstance(raw, dict) or len(raw) > MAX_ENV_VARS:
        raise InvalidInput(f"env must be an object of at most {MAX_ENV_VARS} variables")
    specs: dict[str, str | SecretRef] = {}
    for name, value in raw.items():
        if not re.match(ENV_NAME_PATTERN, name) or name in RESERVED_ENV:
            raise InvalidInput(f"env: {name!r} is not a variable a task may set")
        if isinstance(value, str) and len(value) <= MAX_SECRET_BYTES:
            specs[name] = value
            continue
        try:
            specs[name] = SecretRef.model_validate(value)
        except ValidationError:
            raise InvalidInput(
                f'env.{name}: a string or a secret reference {{"secret": "name"}}'
            ) from None
    return specs


async def resolve_command_env(
    specs: dict[str, str | SecretRef], ctx: ActionContext
) -> dict[str, str]:
    """The command's environment with its secrets' values (read off the event loop)."""
    env = {k: v for k, v in specs.items() if isinstance(v, str)}
    vault = SecretVault(ctx.services.store, ctx.services.settings)
    for name, ref in specs.items():
        if isinstance(ref, SecretRef):
            where = f"shell.exec env {name}"
            value = await asyncio.to_thread(vault.resolve, ctx.client_id, ref.secret, where)
            env[name] = ref.prefix + value
    if sum(len(k) + len(v.encode()) + 11 for k, v in env.items()) > MAX_ENV_BYTES:
        raise InvalidInput(f"env: more than {MAX_ENV_BYTES} bytes in all")
    return env

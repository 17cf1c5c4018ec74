"""Per-process store handles for actors and executor tasks (one engine per database URL)."""

from __future__ import annotations

from functools import lru_cache

from cluster.config import Settings
from core.store import Store


@lru_cache(maxsize=8)
def _store_for(url: str) -> Store:
    return Store.open(url)


def open_store(settings_env: dict[str, str] | None = None) -> Store:
    """The store named by ``settings_env`` (``WONDER_*`` variables), or by this process's env."""
    return _store_for(settings_from_env(settings_env).resolved_database_url)


def settings_from_env(settings_env: dict[str, str] | None) -> Settings:
    """Settings from explicit ``WONDER_*`` variables (parsed once per distinct set: hot path)."""
    if not settings_env:
        return Settings()
    return _settings_for(tuple(sorted(settings_env.items())))


@lru_cache(maxsize=32)
def _settings_for(items: tuple[tuple[str, str], ...]) -> Settings:
    return Settings(**_settings_kwargs(dict(items)))


def _settings_kwargs(env: dict[str, str]) -> dict[str, object]:
    import json

    out: dict[str, object] = {}
    for key, value in env.items():
        if not key.startswith("WONDER_"):
            continue
        name = key.removeprefix("WONDER_").lower()
        if name not in Settings.model_fields:
            continue
        out[name] = json.loads(value) if value.startswith("[") else value
    return out

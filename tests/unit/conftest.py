"""Unit tests run without Ray and without a real model.

Any attempt to start or attach to a cluster fails the test, and so does any model call other than
a scripted one: unit tests of the loop use ``ScriptedModel``; real models belong to e2e tests.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        import ray
    except ImportError:
        return

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("unit tests must not start Ray; move this test to tests/integration")

    monkeypatch.setattr(ray, "init", refuse)


@pytest.fixture(autouse=True)
def _no_real_models(monkeypatch: pytest.MonkeyPatch) -> None:
    import serving.models

    real = serving.models.chat_model_for

    def scripted_only(profile: Any, *access: Any) -> Any:
        if profile.provider != "scripted":
            raise RuntimeError(
                f"unit tests make no real model calls (profile {profile.id} is {profile.provider})"
            )
        return real(profile, *access)

    monkeypatch.setattr(serving.models, "chat_model_for", scripted_only)

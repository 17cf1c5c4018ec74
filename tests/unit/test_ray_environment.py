"""Every process Wonder starts has its Ray environment before Ray is first imported.

Ray reads ``RAY_AUTH_MODE`` once, when ``ray`` is first imported: a module that imported Ray
before it was set left ``wonder up`` unable to attach to the token-auth head it had just started.
``cluster/__init__.py`` owns the environment; these tests start fresh interpreters with none of
Ray's variables and record what Ray saw at its first import, through every entry point of the
distribution and every module of the ``cluster`` package.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cluster import ray_environment

ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter: a finder that notes the environment when `ray` is first imported.
PROBE = """
import importlib, json, os, sys
seen = {}
class FirstRayImport:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" and not seen:
            seen["RAY_AUTH_MODE"] = os.environ.get("RAY_AUTH_MODE")
        return None
sys.meta_path.insert(0, FirstRayImport())
for module in sys.argv[1:]:
    importlib.import_module(module)
print(json.dumps(seen))
"""


def first_ray_import(*modules: str) -> dict[str, str | None]:
    """What the environment held when Ray was first imported, importing ``modules`` in order."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *modules],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    seen: dict[str, str | None] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


def entry_point_modules() -> list[str]:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return sorted({target.split(":")[0] for target in scripts.values()})


def cluster_modules() -> list[str]:
    """Every module of the package, its subpackages' too (``cluster.cli.up``), but no
    ``__main__`` (importing one runs its command)."""
    return sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in (ROOT / "cluster").rglob("*.py")
        if path.stem not in ("__init__", "__main__")
    )


@pytest.mark.parametrize("module", entry_point_modules())
def test_an_entry_point_sets_the_auth_mode_before_ray_is_imported(module: str) -> None:
    assert first_ray_import(module, "ray") == {"RAY_AUTH_MODE": "token"}


def test_every_cluster_module_sees_the_auth_mode_set_when_it_imports_ray() -> None:
    # Any module of the package, imported first, brings the package's environment with it.
    for module in ("cluster.preflight", "cluster.bootstrap"):
        assert first_ray_import(module) == {"RAY_AUTH_MODE": "token"}
    assert first_ray_import(*cluster_modules()) == {"RAY_AUTH_MODE": "token"}


def test_an_explicit_auth_mode_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    ray_environment.prepare()
    assert ray_environment.auth_mode() == "disabled"

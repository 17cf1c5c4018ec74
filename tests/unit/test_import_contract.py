"""The import contract of ``make lint`` (``lint-imports``, pyproject ``[tool.importlinter]``) holds,
and it catches a new arrow back up: a copy of the tree with one upward import fails it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "actors", "cluster", "serving", "jobs", "library")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    command = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(command), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The packages' Python files and the lint configuration, copied."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=_not_python)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _not_python(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".py") and not (Path(directory) / n).is_dir()]


def test_the_tree_keeps_the_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert f"{contracts} kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("core/settings.py", "import cluster.wiring", "Layers"),
        ("actors/executor.py", "from serving import models", "Layers"),
        ("core/ids.py", "import ray", "core imports no Ray"),
        ("actors/conversation/planning.py", "import ray", "Actors are plain Python"),
        ("actors/conversation/domain.py", "import actors.conversation.actor", "No import cycles"),
        ("cluster/cli/agents.py", "import cluster.bootstrap", "import no Ray, vLLM or store"),
        # The MCP client, imported where a conversation actor would load it with its ports.
        ("cluster/mcp.py", "import actors.mcp.connections", "stays lean"),
    ],
)
def test_a_new_arrow_back_up_breaks_it(tree: Path, module: str, line: str, broken: str) -> None:
    target = tree / module
    target.write_text(target.read_text() + f"\n\ndef _added() -> None:\n    {line}\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert f"{broken}" in result.stdout and "BROKEN" in result.stdout

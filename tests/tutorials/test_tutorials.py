"""The tutorials (docs/tutorials/*.md) run as written, against a running system: the session's
Ray with the gateway deployed on Serve, the system library applied as ``wonder up`` applies it,
a client of their own with its key, and their shell blocks run by bash in a fresh ``HOME``.

What differs from a reader's machine, and only this: the gateway's URL (the session's port, not
8000), and the model. A persona the page writes with ``model_profile_id: local`` gets the page's
scripted model here (``SCRIPTS``: the same tool calls a reader's local model makes through its
tool shortcuts, answers in other words), so the tier takes seconds a turn, not a CPU model's
minutes. Pages whose turns the page's words depend on say ``…`` where the model speaks.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.ids import utc_now
from core.library_files import apply_library
from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.test_gateway import (  # the gateway deployed once per session
    gateway_url,  # noqa: F401 - fixture
    http_client,
)
from tests.tutorials.pages import Step, placeholders, steps, unmatched

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "tutorials"
TOOLS = Path(__file__).resolve().parent / "tools"  # on the session's PYTHONPATH (tests/conftest.py)
BLOCK_TIMEOUT_S = 180
URL = "http://127.0.0.1:8000"

# The page's model: what the scripted model answers in place of the local one (rule style: the
# first step whose ``match`` is in the last message plays; ``{{last_tool}}`` is the last tool
# result). Pages not listed run no turn.
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "first-agent.md": [
        {
            "match": "What is 12*7",
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "12*7"}}],
        },
        {"match": "12*7", "reply": "Arr, that be 84, matey."},
        {"reply": "Arr, 42 it be."},
    ],
    "custom-tool.md": [
        {
            "match": "How many words",
            "tool_calls": [
                {"name": "word_count", "arguments": {"text": "the quick brown fox jumps"}}
            ],
        },
        {"match": "words", "reply": "It has {{last_tool}} words."},
    ],
    "memory.md": [
        {"match": "Which city", "reply": "From what I remember: {{context}}"},
        {"reply": "{}"},
    ],
    "fork-and-thread.md": [
        {"match": "Paris", "reply": "Paris is lovely in spring."},
        {"match": "Rome", "reply": "Rome is lovely in spring."},
        {"reply": "Noted."},
    ],
}


def pages() -> list[str]:
    return sorted(p.name for p in PAGES.glob("*.md") if p.name != "README.md")


@pytest.fixture(scope="module")
def system_library(ray_cluster: Cluster) -> None:
    """The default library, as ``wonder up`` applies it (identical objects stay as they are)."""
    apply_library(ray_cluster.store, ROOT / "library", utc_now())


def model_of(page: str, client: httpx.Client) -> str | None:
    """The scripted model standing in for ``local`` on ``page`` (in its client's library)."""
    script = SCRIPTS.get(page)
    if script is None:
        return None
    profile_id = "tutorial-model"
    body = {"provider": "scripted", "model": "script", "script": script}
    stored = client.put(f"/v1/model-profiles/{profile_id}", json=body)
    assert stored.status_code == 200, stored.text
    return profile_id


def as_run_here(text: str, url: str, model: str | None) -> str:
    """The page's text with the session's gateway URL and, where it names it, the page's model."""
    text = text.replace(URL, url).replace(URL.replace("http", "ws"), url.replace("http", "ws"))
    if model is not None:
        text = re.sub(r'(model_profile_id"?:\s*)"local"', rf'\1"{model}"', text)
        text = re.sub(r"(model_profile_id:\s*)local\b", rf"\g<1>{model}", text)
    return text


def shell_env(ray_cluster: Cluster, home: Path, provided: dict[str, str]) -> dict[str, str]:
    """What the page's shell starts with: the session's settings (the operator's commands open
    its store), the gateway's port for the CLI's default URL, the reader's own variables."""
    return {
        **ray_cluster.env,
        "PATH": f"{ROOT / '.venv' / 'bin'}:/usr/bin:/bin",
        "HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(TOOLS)]),
        "WONDER_GATEWAY_HOST": "127.0.0.1",
        "WONDER_GATEWAY_PORT": str(ray_cluster.serve_port),
        "RAY_ADDRESS": "",
        **provided,
    }


def run_step(step: Step, page: str, state: Path, env: dict[str, str], text: str) -> None:
    body, names = placeholders(text)
    missing = [name for name in names if name not in env]
    assert not missing, f"{page}:{step.line}: the page asks the reader for {missing}"
    script = f"set -euo pipefail\nset -a\nsource {state}\n{body}\nexport -p > {state}\n"
    try:
        done = subprocess.run(
            ["bash", "-c", script],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{page}:{step.line}: still running after {exc.timeout} s") from None
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{page}:{step.line}: exit {done.returncode}\n{output}"
    if step.expected is not None:
        missing_line = unmatched(step.expected, output)
        assert missing_line is None, (
            f"{page}:{step.line}: the output lacks {missing_line!r}; it was:\n{output}"
        )


@pytest.mark.parametrize("page", pages())
def test_tutorial_runs_as_written(
    page: str,
    gateway_url: str,  # noqa: F811
    ray_cluster: Cluster,
    system_library: None,
    tmp_path: Path,
) -> None:
    client_id, key = make_client(ray_cluster.store, f"tutorial {page}")
    home = tmp_path / "home"
    home.mkdir()
    state = tmp_path / "shell-state"
    state.write_text("")
    env = shell_env(ray_cluster, home, {"WONDER_KEY": key, "WONDER_CLIENT": client_id})
    with http_client(gateway_url, key) as client:
        model = model_of(page, client)
    ran = 0
    for step in steps(PAGES / page):
        text = as_run_here(step.body, gateway_url, model)
        if step.kind == "file":
            target = Path(step.path.replace("~", str(home), 1))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            shipped = TOOLS / target.name
            if target.suffix == ".py":  # the session's workers import the page's code from here
                assert shipped.read_text() == step.body, f"{page}:{step.line}: {shipped} differs"
        elif step.kind == "run":
            run_step(step, page, state, env, text)
            ran += 1
    assert ran > 0 or all(s.kind == "skipped" for s in steps(PAGES / page)), page

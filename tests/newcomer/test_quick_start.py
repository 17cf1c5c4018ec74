"""A newcomer's first steps, exactly as the README's quick start gives them, as subprocesses in a
scrubbed environment: none of Ray's, Wonder's or Hugging Face's variables inherited, a fresh
``HOME`` (so the model is converted as on a new machine) and a fresh data dir.

The commands come from README.md itself (``tests/newcomer/readme.py``): ``make up`` with its real
defaults (the local model included), the curl example until its turn completes, ``wonder chat``
through a pseudo-terminal, ``make status``, ``make down`` followed at once by ``make up``, and
``make down``. Two things differ from a newcomer's shell, both set explicitly: the data dir
(``WONDER_DATA_DIR``: a developer's own ``./var`` is left alone) and the gateway's port
(``WONDER_GATEWAY_PORT``: a free one, put in place of the README's 8000).
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.newcomer.readme import ROOT, QuickStart, quick_start

pytestmark = pytest.mark.timeout(2400)

UP_TIMEOUT_S = 1200.0
TURN_TIMEOUT_S = 300.0
INHERITED = ("PATH", "LANG", "LC_ALL", "TERM", "USER", "LOGNAME", "TMPDIR")
# What `wonder up` may print: its own lines (`==> `, the model's preparation, the summary) and
# make's. Ray's and Serve's log records (JSON lines, `INFO 2026-…`, `(raylet)`) go to a file.
OWN_LINE = re.compile(
    r"^(==> |wonder model: |\.venv/bin/wonder |make(\[\d+\])?: |Wonder is up\.$"
    r"|  (gateway|dashboard|api key|agent) |Try: |Stop: |$)"
)


@dataclass
class Newcomer:
    """A shell as a newcomer has it, in the repository, after ``make up``."""

    env: dict[str, str]
    port: int
    logs: Path
    key: str = ""
    agent_id: str = ""

    def sh(self, script: str, timeout: float, name: str) -> subprocess.CompletedProcess[str]:
        """Run ``script`` with bash in the repository; its output is kept in ``logs/<name>``."""
        result = subprocess.run(
            ["bash", "-c", script],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        (self.logs / name).write_text(result.stdout + "\n--- stderr ---\n" + result.stderr)
        return result

    def readme(self, text: str) -> str:
        """A README snippet with this newcomer's values in place of its placeholders."""
        return (
            text.replace("AGENT_ID", self.agent_id)
            .replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
            .replace("export WONDER_KEY=...", f"export WONDER_KEY={self.key}")
        )

    def up(self, guide: QuickStart, name: str) -> None:
        result = self.sh(guide.command("make up"), UP_TIMEOUT_S, name)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-4000:]
        self.key = _printed(output, "api key")
        self.agent_id = _printed(output, "agent")
        # What `wonder up` printed (before it, make may install what changed since last time).
        printed = output[output.index(".venv/bin/wonder up") :]
        noise = [line for line in printed.splitlines() if not OWN_LINE.match(line)]
        assert not noise, f"`wonder up` printed lines that are not its own: {noise[:5]}"


def _printed(output: str, label: str) -> str:
    found = re.search(rf"^  {label}\s+(\S+)", output, re.MULTILINE)
    assert found, f"`make up` did not print the {label}:\n{output[-2000:]}"
    return found.group(1)


def scrubbed_env(home: Path, data_dir: Path, port: int) -> dict[str, str]:
    env = {name: os.environ[name] for name in INHERITED if name in os.environ}
    env.update(HOME=str(home), WONDER_DATA_DIR=str(data_dir), WONDER_GATEWAY_PORT=str(port))
    return env


@pytest.fixture(scope="module")
def guide() -> QuickStart:
    return quick_start()


@pytest.fixture(scope="module")
def newcomer(guide: QuickStart, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Newcomer]:
    root = tmp_path_factory.mktemp("newcomer")
    (root / "home").mkdir()
    (root / "logs").mkdir()
    person = Newcomer(scrubbed_env(root / "home", root / "data", free_port()), 0, root / "logs")
    person.port = int(person.env["WONDER_GATEWAY_PORT"])
    try:
        person.up(guide, "make-up.log")
        yield person
    finally:
        person.sh(guide.command("make down"), 120, "make-down-at-exit.log")


def test_the_curl_example_answers_the_question_with_the_calculator(
    newcomer: Newcomer, guide: QuickStart
) -> None:
    script = newcomer.readme(guide.block_with("curl"))
    env_key = f"export WONDER_KEY={newcomer.key}\nset -euo pipefail\n"
    # The README's script, then (for this test only) the conversation it made.
    script = env_key + script + '\necho "conversation $CONV"\n'
    result = newcomer.sh(script, TURN_TIMEOUT_S, "curl.log")
    assert result.returncode == 0, result.stderr
    *_, answer, made = result.stdout.strip().splitlines()
    # The line may begin with the message's acknowledgement, whose ids are random (one may hold 89).
    words = re.sub(r"\b[a-z]+_[0-9A-Z]{26}\b", "<id>", answer)
    assert "84" in words and "89" not in words, answer
    conversation = f"http://127.0.0.1:{newcomer.port}/v1/conversations/{made.split()[1]}"
    auth = {"Authorization": f"Bearer {newcomer.key}"}
    turns = httpx.get(f"{conversation}/turns", headers=auth, timeout=30).json()["items"]
    moves = httpx.get(f"{conversation}/turns/{turns[0]['id']}", headers=auth, timeout=30)
    moves = moves.json()["moves"]
    called = [m["tool_call"]["name"] for m in moves if m.get("tool_call")]
    assert called == ["calculator"], moves


def test_wonder_chat_answers_in_a_terminal(newcomer: Newcomer, guide: QuickStart) -> None:
    chat = newcomer.readme(guide.block_with("wonder chat"))
    transcript = converse(newcomer, chat, "What is 12*7?")
    (newcomer.logs / "chat.log").write_text(transcript)
    reply = transcript.split("agent> ", 1)[1].split("you> ", 1)[0]
    assert "84" in reply, transcript


def test_status_says_what_runs(newcomer: Newcomer, guide: QuickStart) -> None:
    result = newcomer.sh(guide.command("make status"), 60, "make-status.log")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^gateway\s+up\s", result.stdout, re.MULTILINE), result.stdout


def test_down_then_up_at_once_works_back_to_back(newcomer: Newcomer, guide: QuickStart) -> None:
    down = newcomer.sh(guide.command("make down"), 120, "make-down.log")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "Wonder is down" in down.stdout
    newcomer.up(guide, "make-up-again.log")
    health = httpx.get(f"http://127.0.0.1:{newcomer.port}/healthz", timeout=30)
    assert health.status_code == 200


def converse(newcomer: Newcomer, script: str, question: str) -> str:
    """Run ``script`` (which starts ``wonder chat``) on a pseudo-terminal, ask ``question``,
    and return the transcript once the next prompt shows; the chat ends on an empty line."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        ["bash", "-c", script], cwd=ROOT, env=newcomer.env,
        stdin=terminal, stdout=terminal, stderr=terminal, start_new_session=True,
    )  # fmt: skip
    os.close(terminal)
    try:
        transcript = read_until(controller, "you> ", 60)
        os.write(controller, f"{question}\n".encode())
        transcript += read_until(controller, "you> ", TURN_TIMEOUT_S)
        os.write(controller, b"\n")
        assert process.wait(timeout=60) == 0, transcript
        return transcript
    finally:
        if process.poll() is None:
            process.kill()
        os.close(controller)


def read_until(fd: int, marker: str, timeout: float) -> str:
    """Read the terminal until ``marker`` appears; the text read."""
    deadline = time.monotonic() + timeout
    seen = ""
    while marker not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {marker!r} within {timeout:.0f} s; the terminal showed:\n{seen}"
        ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the other side closed
                break
            seen += chunk.decode(errors="replace")
    return seen

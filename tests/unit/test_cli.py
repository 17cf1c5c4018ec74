"""The ``wonder`` CLI without Ray: help, library apply, keys, and the pure parts of up/down."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cluster import bootstrap, cli, processes
from cluster.cli import api_client, chat, local, operator, state
from core.settings import Settings
from core.store import Store


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("WONDER_RAY_ADDRESS", raising=False)
    monkeypatch.delenv("WONDER_API_KEY", raising=False)
    monkeypatch.delenv("WONDER_KEY", raising=False)
    return tmp_path


def store_in(data_dir: Path) -> Store:
    return Store.open(f"sqlite:///{data_dir / 'wonder.db'}")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "COMMAND"),
        (["up"], "--no-llm"),
        (["down"], "recorded PID"),
        (["status"], "gateway"),
        (["chat"], "AGENT_ID"),
        (["chat"], "--conversation"),
        (["library", "apply"], "DIR"),
        (["keys", "create"], "NAME"),
        (["keys", "create"], "--operator"),
        (["doctor"], "misconfigured"),
        (["agents", "create"], "--persona"),
        (["conversations", "list"], "--ancestry"),
        (["conversations", "tail"], "reconnects from the last seq"),
        (["conversations", "fork"], "--turn"),
        (["turns", "show"], "TURN_ID"),
        (["workflows", "run"], "--wait"),
        (["memories", "search"], "QUERY"),
        (["projects", "merge"], "--conversation"),
        (["library", "get"], "KIND"),
        (["quota", "show"], "exit 3"),
    ],
)
def test_help(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--help"])
    assert exited.value.code == 0
    assert expected in capsys.readouterr().out


def test_unknown_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["status", "--bogus"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_job_help_lists_the_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["job", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for job in ("embed", "consolidate", "compact"):
        assert f"    {job}" in out
    assert "``" not in out  # a user's description, not a module docstring


@pytest.mark.parametrize(
    ("job", "flags"),
    [
        ("consolidate", ["--min-age-hours", "--group-size", "--model-profile", "--parallel"]),
        ("embed", ["--model", "--all", "--batch-size", "--output"]),
        ("compact", ["--keep-versions-hours", "--rebuild-vector-index"]),
    ],
)
def test_a_jobs_help_shows_its_own_flags(
    job: str, flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["job", job, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: wonder job {job}")
    for flag in [*flags, "--address", "--local", "--no-wait"]:
        assert flag in out


def test_a_jobs_mistyped_flag_fails_before_submitting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["job", "consolidate", "--min-age-hourz", "3"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --min-age-hourz" in capsys.readouterr().err


def test_library_apply_shipped_library(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["library", "apply", str(operator.default_library_dir())]) == 0
    out = capsys.readouterr().out
    assert "calculator" in out and "new version" in out
    store = store_in(data_dir)
    persona = store.personas.get("assistant")
    assert persona.model_profile_id == "local"
    for tool_id in persona.tool_ids:
        tool = store.tools.get(tool_id)
        assert store.tasks.get(tool.target_id).id == tool.target_id
    assert cli.main(["library", "apply", str(operator.default_library_dir())]) == 0
    assert "0 new versions" in capsys.readouterr().out


def test_library_apply_reports_every_problem(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lib = tmp_path / "lib"
    (lib / "personas").mkdir(parents=True)
    (lib / "tools").mkdir()
    (lib / "personas" / "ok.yaml").write_text("system_prompt: hi\n")
    (lib / "personas" / "bad.yaml").write_text("system_prompt: 5\ncolour: red\n")
    (lib / "tools" / "t.yaml").write_text(
        "name: t\ndescription: d\ntarget_type: task\ntarget_id: x\n"
        "input_schema: {type: object, properties: {a: {type: strnig}}}\n"
    )
    assert cli.main(["library", "apply", str(lib)]) == 1
    err = capsys.readouterr().err
    assert "personas/bad.yaml: system_prompt: Input should be a valid string" in err
    assert "personas/bad.yaml: colour: Extra inputs are not permitted" in err
    assert "tools/t.yaml: input_schema: Value error, input_schema is not a valid JSON Schema" in err
    assert store_in(data_dir).personas.list_latest() == []  # nothing stored


def test_keys_create(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["keys", "create", "my-app"]) == 0
    out = capsys.readouterr().out
    key = out.split("api key: ")[1].split()[0]
    client_id = out.split("client: ")[1].split()[0]
    assert store_in(data_dir).clients.client_for_key(key) == client_id


def test_first_client_is_made_once(data_dir: Path) -> None:
    settings = Settings()
    store = store_in(data_dir)
    first = local.first_client(settings, store)
    assert local.first_client(settings, store) == first
    assert store.agents.get(first["agent_id"]).persona_ref.id == "assistant"  # type: ignore[union-attr]
    assert (data_dir / state.FIRST_CLIENT_FILE).stat().st_mode & 0o777 == 0o600
    assert api_client.api_key(settings, None) == first["api_key"]
    assert api_client.api_key(settings, "given") == "given"


def test_chat_without_key_fails_plainly(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["chat", "agent_x"]) == 4  # refused: no key
    assert "no API key" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["chat"], ["chat", "agent_x", "--conversation", "conv_x"]])
def test_chat_needs_an_agent_or_a_conversation_not_both(
    argv: list[str], data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2  # usage, before any key or request
    assert "--conversation ID to resume" in capsys.readouterr().err


def test_chat_resume_keeps_the_last_turns_user_and_agent_messages() -> None:
    def message(turn: str, role: str) -> dict[str, str]:
        return {"turn_id": turn, "role": role, "content": f"{turn}-{role}"}

    messages = [message(t, r) for t in ("t1", "t2", "t3") for r in ("user", "tool", "agent")]
    kept = chat.last_turns(messages, 2)
    assert [m["content"] for m in kept] == ["t2-user", "t2-agent", "t3-user", "t3-agent"]
    assert chat.last_turns(messages, 0) == []


def test_down_with_nothing_running(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["down"]) == 0
    assert "nothing to stop" in capsys.readouterr().out


def test_stale_head_record_is_ignored(data_dir: Path) -> None:
    record = {
        "pid": 2**22 + 12345,  # above pid_max on Linux: no such process
        "address": "127.0.0.1:1",
        "gcs_port": 1,
        "dashboard_port": 2,
        "temp_dir": "/tmp/x",
        "log_file": "/tmp/x.log",
        "started_at": 0.0,
    }
    (data_dir / bootstrap.HEAD_FILE).write_text(json.dumps(record))
    settings = Settings()
    assert bootstrap.read_head(settings) is None
    assert bootstrap.cluster_address(settings) is None
    assert not bootstrap.stop_local_head(settings, print)
    assert not (data_dir / bootstrap.HEAD_FILE).exists()


def test_ray_env_is_explicit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "somewhere:1")
    env = bootstrap.ray_process_env()
    assert env["RAY_AUTH_MODE"] == "token" and "RAY_ADDRESS" not in env
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert bootstrap.ray_process_env()["RAY_AUTH_MODE"] == "disabled"
    assert os.environ["RAY_ADDRESS"] == "somewhere:1"  # our own environment is left alone


def test_long_data_dirs_get_a_short_ray_temp_dir(tmp_path: Path) -> None:
    short = Settings(data_dir=Path("/tmp/w"))
    assert bootstrap.ray_temp_dir(short) == Path("/tmp/w/ray")
    deep = Settings(data_dir=tmp_path / ("d" * 80))
    temp = bootstrap.ray_temp_dir(deep)
    assert len(str(temp)) <= bootstrap.MAX_TEMP_DIR_CHARS and temp == bootstrap.ray_temp_dir(deep)


def test_a_group_and_its_descendants_hold_this_process_and_its_children() -> None:
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        tree = processes.group_and_descendants(os.getpgid(0), processes.process_table())
        assert os.getpid() in tree and child.pid in tree  # a child in a group of its own
    finally:
        child.kill()
        child.wait()
    assert not processes.pid_alive(child.pid)


def test_the_holder_of_a_listening_port_is_found() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert os.getpid() in processes.port_holders(port)
    assert processes.port_holders(port) == {}


# --------------------------------------------------------------------------- chat's reply


async def frames(*events: dict[str, object]) -> AsyncIterator[str]:
    """A stream's frames as the gateway sends them (JSON text), in order."""
    for event in events:
        yield json.dumps(event)


def agent_message(turn_id: str, seq: int, content: str) -> dict[str, object]:
    message = {"turn_id": turn_id, "role": "agent", "content": content}
    return {"seq": seq, "type": "message", "message": message}


async def printed(*events: dict[str, object]) -> tuple[str, bool, int]:
    out = io.StringIO()
    chat_ = chat.TerminalChat("http://127.0.0.1:1", "wk_x", lambda: None, out)
    ended = await chat_.print_reply(frames(*events), chat.Reply())
    return out.getvalue(), ended, chat_.last_seq


async def test_chat_prints_the_streamed_tokens_once() -> None:
    text, ended, last_seq = await printed(
        {"seq": None, "type": "ack", "turn_id": "t1"},
        {"seq": None, "type": "token", "turn_id": "t1", "delta": "you "},
        {"seq": None, "type": "token", "turn_id": "t1", "delta": "said hi"},
        agent_message("t1", 4, "you said hi"),
        {"seq": 5, "type": "turn.completed", "turn_id": "t1"},
    )
    assert (text, ended, last_seq) == ("agent> you said hi\n", True, 5)


async def test_chat_prints_a_reply_whose_tokens_went_by_before_it_subscribed() -> None:
    """A short reply to a message sent on connecting can stream before the subscription: the
    stored agent message stands in for its tokens (the ack may come after the turn's events)."""
    text, ended, _ = await printed(
        {"seq": 2, "type": "turn.started", "turn_id": "t1"},
        agent_message("t1", 4, "you said hi"),
        {"seq": 5, "type": "turn.completed", "turn_id": "t1"},
        {"seq": None, "type": "ack", "turn_id": "t1"},
    )
    assert (text, ended) == ("agent> you said hi\n", True)


async def test_chat_prints_each_agent_message_of_a_turn_once() -> None:
    text, _, _ = await printed(
        {"seq": None, "type": "ack", "turn_id": "t1"},
        agent_message("t1", 3, "let me look. "),  # its tokens went by unseen
        {"seq": None, "type": "token", "turn_id": "t1", "delta": "found it"},
        agent_message("t1", 6, "found it"),
        agent_message("t0", 7, "another turn's reply"),
        {"seq": 8, "type": "turn.completed", "turn_id": "t1"},
    )
    assert text == "agent> let me look. found it\n"


def test_a_dead_sessions_socket_is_not_a_ready_head(tmp_path: Path) -> None:
    sockets = tmp_path / "session_1" / "sockets"
    sockets.mkdir(parents=True)
    (tmp_path / "session_latest").symlink_to(tmp_path / "session_1")
    with socket.socket(socket.AF_UNIX) as raylet:
        raylet.bind(str(sockets / "raylet"))
        assert not bootstrap._session_ready(tmp_path)  # bound, not listening: a dead raylet's
        raylet.listen()
        assert bootstrap._session_ready(tmp_path)
    assert not bootstrap._session_ready(tmp_path)  # closed: its file stays behind
    bootstrap._forget_stopped_session(tmp_path)
    assert not (tmp_path / "session_latest").exists()

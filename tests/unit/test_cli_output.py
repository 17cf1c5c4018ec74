"""The ``wonder`` command line without a server: parsing, ``--json``, exit codes, the mapping of
API errors, ids in URL paths, and how a followed conversation is printed."""

from __future__ import annotations

import argparse
import io
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cluster.cli import api_client, api_parser, output, parser, tail
from cluster.cli.entry import main, parse
from cluster.cli.handlers import resolve
from cluster.cli.output import ExitCode

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))
    for variable in ("WONDER_API_KEY", "WONDER_KEY"):
        monkeypatch.delenv(variable, raising=False)
    return tmp_path


# --------------------------------------------------------------------------- parsing


def handlers(command: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, str]:
    """Every command's words and handler, walking the parser's subcommands."""
    found: dict[str, str] = {}
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= handlers(sub, (*path, name))
    if not found and command.get_default("handler"):
        found[" ".join(path)] = command.get_default("handler")
    return found


def test_every_command_has_a_handler_that_exists() -> None:
    found = handlers(parser.build_parser())
    expected = {
        "up", "down", "status", "doctor", "chat", "job", "model setup",
        "agents list", "agents show", "agents create",
        "conversations list", "conversations show", "conversations create",
        "conversations send", "conversations tail", "conversations fork",
        "conversations complete", "conversations delete",
        "turns list", "turns show",
        "workflows run", "workflows status", "workflows cancel", "workflows list",
        "memories search", "memories list",
        "projects create", "projects list", "projects show", "projects diff", "projects merge",
        "library apply", "library list", "library get",
        "keys create", "keys list", "keys revoke", "quota set", "quota show",
    }  # fmt: skip
    assert set(found) == expected
    for handler in found.values():
        assert callable(resolve(handler)), handler


@pytest.mark.parametrize(
    "argv",
    [
        ["--json", "--url", "http://h:1", "--api-key", "k", "--user", "u", "agents", "list"],
        ["agents", "list", "--json", "--url", "http://h:1", "--api-key", "k", "--user", "u"],
        ["--json", "--url", "http://h:1", "agents", "list", "--api-key", "k", "--user", "u"],
    ],
)
def test_shared_options_go_before_or_after_the_command(argv: list[str]) -> None:
    args = parse(argv)
    assert (args.json, args.url, args.api_key, args.user) == (True, "http://h:1", "k", "u")
    assert args.handler == "cluster.cli.agents:cmd_list"


def test_without_shared_options_the_defaults_hold() -> None:
    args = parse(["conversations", "tail", "conv_1"])
    assert (args.json, args.url, args.api_key, args.user) == (False, None, None, None)
    assert (args.after_seq, args.lines, args.once, args.no_follow) == (None, 10, False, False)


def test_every_command_takes_json() -> None:
    for words in handlers(parser.build_parser()):
        if words != "job":  # its arguments are the job's own
            assert parse([*words.split(), *placeholders(words), "--json"]).json, words


def placeholders(words: str) -> list[str]:
    """Enough positional arguments (and required options) for each command to parse."""
    needed = {
        "chat": ["a"], "agents show": ["a"], "agents create": ["n", "--persona", "p"],
        "conversations show": ["c"], "conversations create": ["--agent", "a"],
        "conversations send": ["c", "hi"], "conversations tail": ["c"],
        "conversations fork": ["c"], "conversations complete": ["c"],
        "conversations delete": ["c"], "turns list": ["c"], "turns show": ["c", "t"],
        "workflows run": ["w"], "workflows status": ["r"], "workflows cancel": ["r"],
        "memories search": ["a", "q"], "memories list": ["a"], "projects create": ["n"],
        "projects show": ["p"], "projects diff": ["--run", "r"], "projects merge": ["--run", "r"],
        "library apply": ["d"], "library list": ["tools"], "library get": ["tools", "t"],
        "keys create": ["n"], "keys revoke": ["k"], "quota set": ["c"], "quota show": ["c"],
    }  # fmt: skip
    return needed.get(words, [])


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("wonder ")


@pytest.mark.parametrize(
    ("given", "kind"),
    [("personas", "personas"), ("persona", "personas"), ("model_profiles", "model-profiles"),
     ("Model-Profile", "model-profiles"), ("tool", "tools"), ("workflows", "workflows")],
)  # fmt: skip
def test_library_kinds(given: str, kind: str) -> None:
    assert api_parser.kind_name(given) == kind


def test_an_unknown_library_kind_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["library", "list", "agents"])
    assert exited.value.code == ExitCode.USAGE
    assert "one of personas, model-profiles" in capsys.readouterr().err


def test_the_help_imports_no_ray_and_no_store() -> None:
    """``wonder --help`` and an API command's modules: nothing heavy (measured by
    benchmarks/cli_startup.py)."""
    probe = (
        "import sys, contextlib, io\n"
        "from cluster.cli.entry import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "import cluster.cli.conversations, cluster.cli.tail, cluster.cli.agents\n"
        "print(sorted(m for m in ('ray', 'vllm', 'sqlalchemy', 'torch', 'lancedb') "
        "if m in sys.modules))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


# --------------------------------------------------------------------------- exit codes


@pytest.mark.parametrize(
    ("status", "code", "retriable", "exit_code"),
    [
        (404, "NOT_FOUND", False, ExitCode.NOT_FOUND),
        (401, "UNAUTHORIZED", False, ExitCode.REFUSED),
        (403, "PERMISSION_DENIED", False, ExitCode.REFUSED),
        (400, "INVALID_INPUT", False, ExitCode.USAGE),
        (422, "INVALID_INPUT", False, ExitCode.USAGE),
        (409, "CONFLICT", False, ExitCode.FAILURE),
        (409, "AGENT_DECLINED", False, ExitCode.FAILURE),
        (429, "QUOTA_EXCEEDED", True, ExitCode.UNAVAILABLE),
        (503, "UNAVAILABLE", True, ExitCode.UNAVAILABLE),
        (503, "TIMEOUT", True, ExitCode.UNAVAILABLE),
        (500, "INTERNAL_ERROR", True, ExitCode.UNAVAILABLE),
        (500, "INTERNAL_ERROR", False, ExitCode.FAILURE),
        (0, "NOT_FOUND", False, ExitCode.NOT_FOUND),  # a stream's error frame: no status
        (0, "QUOTA_EXCEEDED", True, ExitCode.UNAVAILABLE),
    ],
)
def test_api_errors_map_to_exit_codes(
    status: int, code: str, retriable: bool, exit_code: ExitCode
) -> None:
    assert output.exit_code_for(status, code, retriable) == exit_code


def test_an_api_error_is_one_line_from_its_body() -> None:
    body = {
        "error": {"code": "NOT_FOUND", "message": "agent agent_x not found", "retriable": False}
    }
    error = api_client.error_of(404, body)
    assert error.message == "agent agent_x not found (NOT_FOUND, HTTP 404)"
    assert error.code == ExitCode.NOT_FOUND
    details = [{"path": "a.txt", "message": "merge conflict"}]
    conflict = api_client.error_of(
        409, {"error": {"code": "CONFLICT", "message": "m", "details": details}}
    )
    assert conflict.details == details and conflict.code == ExitCode.FAILURE


def test_an_error_without_the_apis_shape_still_reads() -> None:
    error = api_client.error_of(502, "<html>Bad Gateway</html>")
    assert error.message == "the gateway answered Bad Gateway (HTTP_ERROR, HTTP 502)"
    assert error.code == ExitCode.UNAVAILABLE


def test_without_a_key_an_api_command_is_refused(
    no_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["agents", "list"]) == ExitCode.REFUSED
    assert capsys.readouterr().err.startswith("wonder: no API key: pass --api-key")


def test_the_key_comes_from_the_option_then_the_environment_then_wonder_up(
    no_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.settings import Settings

    settings = Settings()
    assert api_client.api_key(settings, None) is None
    (no_key / "first-client.json").write_text(json.dumps({"api_key": "wk_up"}))
    assert api_client.api_key(settings, None) == "wk_up"
    monkeypatch.setenv("WONDER_KEY", "wk_short")
    assert api_client.api_key(settings, None) == "wk_short"
    monkeypatch.setenv("WONDER_API_KEY", "wk_env")
    assert api_client.api_key(settings, None) == "wk_env"
    assert api_client.api_key(settings, "wk_given") == "wk_given"


def test_an_unreachable_gateway_is_unavailable(
    no_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    assert main(["agents", "list", "--url", url, "--api-key", "wk_x"]) == ExitCode.UNAVAILABLE
    err = capsys.readouterr().err
    assert err.startswith(f"wonder: cannot reach the gateway at {url}") and "wonder status" in err


def test_invalid_settings_are_a_usage_error(
    no_key: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WONDER_GATEWAY_PORT", "eighty")
    assert main(["agents", "list", "--api-key", "wk_x"]) == ExitCode.USAGE
    assert "invalid settings: WONDER_GATEWAY_PORT" in capsys.readouterr().err


@pytest.mark.parametrize(
    "bad", ["../keys", "a/b", "conv_1/complete", "a%2Fb", "a?x=1", "a#b", ".", "..", "", " a"]
)
def test_an_id_that_would_reach_another_route_is_refused(
    bad: str, no_key: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before any request: ids go into URL paths, where "/", "%2F", ".." or "?" would name
    another route (the gateway decodes %2F before routing)."""
    with pytest.raises(output.CliError) as refused:
        api_client.segment(bad)
    assert refused.value.code == ExitCode.USAGE
    argv = ["conversations", "show", bad, "--api-key", "wk_x", "--url", "http://127.0.0.1:9"]
    assert main(argv) == ExitCode.USAGE
    assert "is not an id" in capsys.readouterr().err


def test_real_ids_pass() -> None:
    for good in ("conv_01JABCDEF", "calculator", "memory_assistant", "key_0a1b", "run_01J:x@y+z"):
        assert api_client.segment(good) == good


# --------------------------------------------------------------------------- output


def test_a_table_aligns_its_columns() -> None:
    out = io.StringIO()
    text = output.table(["ID", "NAME", "NOTE"], [["a", None, "x"], ["bbbb", "n", "y\nz"]], out)
    assert text.splitlines() == ["ID    NAME  NOTE", "a     -     x", "bbbb  n     y z"]
    assert out.getvalue() == text + "\n"


def test_progress_goes_to_stderr_when_stdout_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    output.use_json(True)
    try:
        output.say("working")
    finally:
        output.use_json(False)
    output.say("again")
    captured = capsys.readouterr()
    assert captured.err == "==> working\n" and captured.out == "==> again\n"


# --------------------------------------------------------------------------- following


def token(turn: str, delta: str) -> dict[str, Any]:
    return {"seq": None, "type": "token", "turn_id": turn, "delta": delta}


def message(seq: int, turn: str, role: str, content: str, author: str = "app") -> dict[str, Any]:
    stored = {"turn_id": turn, "role": role, "author": author, "content": content}
    return {"seq": seq, "type": "message", "message": stored}


def printed(printer: tail.EventPrinter, *events: dict[str, Any]) -> str:
    return "".join(printer.render(e) for e in events)


def test_a_followed_turn_prints_messages_and_streamed_tokens_once() -> None:
    text = printed(
        tail.EventPrinter(),
        {"seq": None, "type": "subscribed", "after_seq": 0},
        message(1, "t1", "user", "what is 2+2?", author="alice"),
        {"seq": 2, "type": "turn.started", "turn_id": "t1"},
        token("t1", "it is "),
        token("t1", "4"),
        message(3, "t1", "agent", "it is 4"),
        {"seq": 4, "type": "turn.completed", "turn_id": "t1"},
        message(5, "t2", "agent", "a reply whose tokens went by unseen"),
    )
    assert text == (
        "user alice> what is 2+2?\nagent> it is 4\nagent> a reply whose tokens went by unseen\n"
    )


def test_tool_calls_and_failures_are_bracketed() -> None:
    move = {"sequence": 1, "tool_call": {"name": "calculator", "input": {"expression": "2*3"}}}
    text = printed(
        tail.EventPrinter(),
        token("t1", "let me"),
        {"seq": 2, "type": "move", "move": move},
        {"seq": 3, "type": "turn.failed", "turn_id": "t1", "reason": "model unavailable"},
        {"seq": 4, "type": "conversation_ended"},
    )
    assert text == (
        'agent> let me\n[tool calculator {"expression": "2*3"}]\n'
        "[turn t1 failed: model unavailable]\n[conversation ended]\n"
    )


def test_json_lines_carry_every_event_and_nothing_about_the_socket() -> None:
    events = [
        {"seq": None, "type": "subscribed", "after_seq": 0},
        token("t1", "hi"),
        {"seq": 4, "type": "turn.completed", "turn_id": "t1"},
    ]
    lines = printed(tail.EventPrinter(json_lines=True), *events).splitlines()
    assert [json.loads(line) for line in lines] == events[1:]


def test_send_and_wait_prints_only_the_reply() -> None:
    printer = tail.EventPrinter(hide_user=True)
    text = printed(printer, message(1, "t1", "user", "hi"), message(2, "t1", "agent", "hello"))
    assert text == "agent> hello\n"


@pytest.mark.parametrize(
    ("rule", "event", "outcome"),
    [
        (tail.StopRule(), {"type": "turn.completed", "turn_id": "t"}, None),
        (tail.StopRule(once=True), {"type": "turn.completed", "turn_id": "t"}, ExitCode.OK),
        (tail.StopRule(once=True), {"type": "turn.failed", "turn_id": "t"}, ExitCode.FAILURE),
        (tail.StopRule(once=True), {"type": "message", "turn_id": "t"}, None),
        (tail.StopRule(once=True, turn_id="u"), {"type": "turn.completed", "turn_id": "t"}, None),
        (tail.StopRule(once=True, turn_id="u"), {"type": "turn.failed", "turn_id": "u"}, 1),
    ],
)
def test_when_following_stops(
    rule: tail.StopRule, event: dict[str, Any], outcome: int | None
) -> None:
    assert rule.outcome(event) == outcome


def test_an_error_frame_is_an_exit_code() -> None:
    refused = tail.error_frame(
        {"type": "error", "error": {"code": "UNAUTHORIZED", "message": "API key key_1 was revoked"}}
    )
    assert refused.code == ExitCode.REFUSED and "was revoked" in refused.message

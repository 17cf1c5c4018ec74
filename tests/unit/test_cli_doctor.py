"""``wonder doctor`` on this machine, nothing of Wonder running: each misconfiguration is a
problem with its fix, and the command exits 1 on any (real settings, real ports, real tools)."""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from cluster.cli.entry import main


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))
    for variable in ("WONDER_RAY_ADDRESS", "WONDER_DATABASE_URL", "WONDER_GATEWAY_PORT"):
        monkeypatch.delenv(variable, raising=False)
    with socket.socket() as s:  # a gateway port nothing listens on
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("WONDER_GATEWAY_PORT", str(s.getsockname()[1]))
    return tmp_path


def doctor(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    return code, report


def finding(report: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [f for f in report["findings"] if f["name"] == name]
    return found


def test_nothing_running_is_a_note_not_a_problem(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, report = doctor(capsys)
    assert finding(report, "ray head")["state"] == "note"
    assert finding(report, "gateway") == {
        "area": "running",
        "name": "gateway",
        "state": "note",
        "detail": finding(report, "gateway")["detail"],
        "fix": "`wonder up`",
    }
    for name in ("settings", "database", "object store", "gateway port"):
        assert finding(report, name)["state"] == "ok", name
    assert report["logs"] == {}  # none written yet


def test_an_invalid_setting_is_named_with_its_fix(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WONDER_GATEWAY_PORT", "eighty")
    code, report = doctor(capsys)
    assert code == 1 and report["problems"] == 1
    problem = finding(report, "WONDER_GATEWAY_PORT")
    assert problem["state"] == "problem" and "'eighty'" in problem["detail"]
    assert problem["fix"].startswith("fix or unset WONDER_GATEWAY_PORT")


def test_an_unreachable_database_is_a_problem(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql+psycopg2://wonder:secret@127.0.0.1:{port}/wonder"
    monkeypatch.setenv("WONDER_DATABASE_URL", url)
    code, report = doctor(capsys)
    assert code == 1
    problem = finding(report, "database")
    assert problem["state"] == "problem" and "cannot connect" in problem["detail"]
    assert "secret" not in json.dumps(report)  # the password is never printed
    assert "WONDER_DATABASE_URL" in problem["fix"]


def test_a_gateway_port_held_by_another_process_is_named(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        monkeypatch.setenv("WONDER_GATEWAY_PORT", str(listener.getsockname()[1]))
        code, report = doctor(capsys)
    assert code == 1
    problem = finding(report, "gateway port")
    assert f"pid {os.getpid()}" in problem["detail"] and "WONDER_GATEWAY_PORT" in problem["fix"]


def test_missing_system_tools_say_how_to_install_them(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(data_dir))  # none of git, bwrap, prlimit there
    code, report = doctor(capsys)
    assert code == 1
    assert finding(report, "bwrap")["fix"] == "apt-get install bubblewrap (package bubblewrap)"
    assert finding(report, "git")["fix"].startswith("apt-get install git")
    assert finding(report, "prlimit")["fix"].startswith("apt-get install util-linux")


def test_the_report_for_a_person(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (data_dir / "wonder-up.log").write_text("")
    code = main(["doctor"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "running:" and "configuration:" in lines and "logs:" in lines
    assert f"  wonder up           {data_dir / 'wonder-up.log'}" in lines
    assert re.fullmatch(r"no problems|1 problem|[2-9]\d* problems", lines[-1])
    assert (code == 0) == (lines[-1] == "no problems")
    assert "fix: `wonder up`" in out

"""``cluster.jobs``: what ``wonder job`` submits, and ``--local`` running a job in this process."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from cluster import jobs as cli
from core.memory import HashingEmbedder, NewMemory, open_memory_service


def test_entrypoint_quotes_arguments_and_picks_the_interpreter() -> None:
    command = cli.entrypoint("consolidate", ["--agent", "a b"], "/venv/bin/python")
    assert command == "/venv/bin/python -m cluster.jobs consolidate --local --agent 'a b'"
    assert cli.default_python("http://127.0.0.1:8265") == sys.executable
    assert cli.default_python("http://ray-head:8265") == "python"


def test_runtime_env_carries_settings_and_extra_variables(tmp_path: Path) -> None:
    from core.settings import Settings

    env = cli.runtime_env(Settings(data_dir=tmp_path), ["AWS_REGION=eu-west-1"])["env_vars"]
    assert env["WONDER_DATA_DIR"] == str(tmp_path.resolve())
    assert env["AWS_REGION"] == "eu-west-1"
    with pytest.raises(SystemExit):
        cli.runtime_env(Settings(data_dir=tmp_path), ["no-equals-sign"])


def test_compact_runs_locally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Where:
        resolved_lance_uri = str(tmp_path / "lance")
        resolved_object_uri = str(tmp_path / "objects")
        s3_endpoint_url = None

    service = open_memory_service(Where(), HashingEmbedder(16))
    for i in range(3):
        asyncio.run(service.write("a", [NewMemory(content=f"note {i}")]))
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))
    assert cli.main(["compact", "--local", "--vector-index-min-rows", "1000"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["job"] == "compact" and result["after"]["rows"] == 3
    assert result["before"]["fragments"] == 3 and result["after"]["fragments"] == 1

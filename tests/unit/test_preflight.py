"""``wonder up`` refuses wrong store settings at once, naming the setting (cluster/preflight.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cluster.cli import main
from cluster.preflight import SetupError, check_database, check_object_store
from core.settings import Settings
from tests.conftest import free_port
from tests.integration.conftest import S3Server
from tests.integration.conftest import s3_server as s3_server


def up_fails_with(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    **env: str,
) -> str:
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    started = time.monotonic()
    assert main(["up"]) == 1
    assert time.monotonic() - started < 60  # a failure, never a hang (bounds are 5-10 s)
    assert not (tmp_path / "ray-head.json").exists()  # nothing was started
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url", "WONDER_DATABASE_URL is not a database URL"),
        ("postgresql+nodriver://u:pw@127.0.0.1/db", "no driver for 'postgresql+nodriver'"),
    ],
)
def test_a_wrong_database_url_is_named(
    url: str, expected: str, monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    err = up_fails_with(monkeypatch, capsys, tmp_path, WONDER_DATABASE_URL=url)
    assert expected in err


def test_an_unreachable_postgresql_is_named_without_its_password(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    url = f"postgresql+psycopg2://wonder:s3cret@127.0.0.1:{free_port()}/wonder"
    err = up_fails_with(monkeypatch, capsys, tmp_path, WONDER_DATABASE_URL=url)
    assert "WONDER_DATABASE_URL" in err and "cannot connect" in err
    assert "s3cret" not in err and "127.0.0.1" in err


def test_a_running_postgresql_passes(postgres_server: Any) -> None:
    check_database(Settings(database_url=postgres_server.url("postgres")))


def test_an_unreachable_s3_endpoint_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    err = up_fails_with(
        monkeypatch,
        capsys,
        tmp_path,
        WONDER_OBJECT_URI="s3://wonder-objects/objects",
        WONDER_S3_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}",
    )
    assert "WONDER_OBJECT_URI" in err and "WONDER_S3_ENDPOINT_URL" in err


def test_a_missing_bucket_is_named(s3_server: S3Server) -> None:
    settings = Settings(
        lance_uri="s3://no-such-bucket/lance", s3_endpoint_url=s3_server.endpoint_url
    )
    with pytest.raises(SetupError, match=r"WONDER_LANCE_URI .*bucket 'no-such-bucket' does not"):
        check_object_store(settings)

"""API keys without Ray: status by time, storage (and databases made before scopes existed), and
``wonder keys list/revoke``."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cluster import cli
from core.keys import ApiKey, KeyScope, KeyStatus, hash_key, key_id_for_hash
from core.store import Store

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expires_at", "revoked_at", "status"),
    [
        (None, None, KeyStatus.ACTIVE),
        (NOW + timedelta(seconds=1), None, KeyStatus.ACTIVE),
        (NOW, None, KeyStatus.EXPIRED),
        (NOW - timedelta(days=1), None, KeyStatus.EXPIRED),
        (None, NOW, KeyStatus.REVOKED),
        (NOW - timedelta(days=1), NOW, KeyStatus.REVOKED),
    ],
)
def test_key_status(
    expires_at: datetime | None, revoked_at: datetime | None, status: KeyStatus
) -> None:
    key = ApiKey(
        id="key_x",
        client_id="c",
        scope=KeyScope.APP,
        created_at=NOW - timedelta(days=2),
        expires_at=expires_at,
        revoked_at=revoked_at,
    )
    assert key.status(NOW) == status
    assert (key.refusal(NOW) is None) == (status == KeyStatus.ACTIVE)


def test_keys_are_stored_by_hash_and_found_by_id(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'w.db'}")
    key = store.keys.add("client_a", "wk_secret", NOW, name="app", scope=KeyScope.APP)
    assert key.id == key_id_for_hash(hash_key("wk_secret")) and key.scope == KeyScope.APP
    assert store.keys.find("wk_secret") == key and store.keys.find("wk_other") is None
    assert store.keys.get(key.id, "client_a") == key
    for missing in (key.id.replace("key_", "key_f"), "key_../", key.id[:-1]):
        with pytest.raises(Exception, match="not found"):
            store.keys.get(missing)
    with pytest.raises(Exception, match="not found"):
        store.keys.get(key.id, "client_b")  # another client's
    revoked = store.keys.revoke(key.id, NOW)
    assert store.keys.revoke(key.id, NOW + timedelta(hours=1)).revoked_at == revoked.revoked_at
    assert store.keys.list("client_a") == [revoked] and store.keys.list("client_b") == []


def test_a_database_made_before_scopes_gets_the_new_columns(tmp_path: Path) -> None:
    """Keys stored by an earlier version keep working, as admin keys, once the store opens."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as old:
        old.execute(
            "CREATE TABLE api_keys (key_hash VARCHAR(128) PRIMARY KEY, "
            "client_id VARCHAR(64) NOT NULL, created_at VARCHAR(40) NOT NULL)"
        )
        old.execute(
            "INSERT INTO api_keys VALUES (?, ?, ?)",
            (hash_key("wk_old"), "client_old", NOW.isoformat()),
        )
    store = Store.open(f"sqlite:///{path}")
    found = store.keys.find("wk_old")
    assert found is not None and found.scope == KeyScope.ADMIN and found.status(NOW) == "active"
    assert store.keys.revoke(found.id, NOW).status(NOW) == KeyStatus.REVOKED


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))
    return tmp_path


def test_cli_keys_list_and_revoke(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["keys", "create", "my-app"]) == 0
    client_id = capsys.readouterr().out.split("client: ")[1].split()[0]
    assert cli.main(["keys", "list", client_id, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["scope"] == "admin" and listed["status"] == "active"
    assert listed["name"] == "my-app" and "api_key" not in listed
    assert cli.main(["keys", "list"]) == 0
    table = capsys.readouterr().out
    assert listed["id"] in table and "active" in table

    assert cli.main(["keys", "revoke", listed["id"]]) == 0
    assert f"{listed['id']} revoked at" in capsys.readouterr().out
    assert cli.main(["keys", "list", client_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["status"] == "revoked"
    assert cli.main(["keys", "revoke", "key_000000000000000000000000"]) == 3  # not found
    assert "not found" in capsys.readouterr().err
    assert cli.main(["keys", "list", "client_nobody", "--json"]) == 3
    assert "client client_nobody not found" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "expected"), [(["keys", "revoke"], "KEY_ID")])
def test_keys_help(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    assert expected in capsys.readouterr().out


def test_library_apply_into_a_client_or_the_system(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``wonder library apply DIR [--client ID | --system]`` (issue 13)."""
    from core.store.library import SYSTEM

    store = Store.open(f"sqlite:///{data_dir / 'wonder.db'}")
    lib = tmp_path / "lib"
    (lib / "personas").mkdir(parents=True)
    (lib / "personas" / "shared.yaml").write_text("system_prompt: shipped\n")
    assert cli.main(["library", "apply", str(lib)]) == 0
    assert store.personas.find("shared").owner == SYSTEM

    assert cli.main(["keys", "create", "app"]) == 0
    client_id = capsys.readouterr().out.split("client: ")[1].split()[0]
    # The system's ids are refused in a client's library, and nothing is stored.
    (lib / "personas" / "mine.yaml").write_text("system_prompt: mine\n")
    assert cli.main(["library", "apply", str(lib), "--client", client_id]) == 1
    assert "personas/shared.yaml: persona 'shared' belongs to the system library" in (
        capsys.readouterr().err
    )
    assert store.personas.owner_of("mine", client_id) is None
    (lib / "personas" / "shared.yaml").unlink()
    assert cli.main(["library", "apply", str(lib), "--client", client_id]) == 0
    assert store.personas.find("mine", client_id=client_id).owner == client_id
    assert store.personas.owner_of("mine", None) is None  # not in the system library
    assert store.personas.owner_of("mine", "client_other") is None
    assert cli.main(["library", "apply", str(lib), "--client", "client_nobody"]) == 3
    assert "client client_nobody not found" in capsys.readouterr().err
    assert cli.main(["library", "apply", str(lib), "--system"]) == 0
    assert store.personas.find("mine").owner == SYSTEM

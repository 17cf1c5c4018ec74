"""The operator's commands on a real SQLite store: operator keys named as such (``--admin`` a
deprecated alias), the new key's id in the audit trail, unknown clients refused with exit 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.cli.entry import main
from core.store import Store


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv("WONDER_DATA_DIR", str(tmp_path))
    return Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")


def created(out: str) -> tuple[str, str]:
    return out.split("client: ")[1].split()[0], out.split("api key: ")[1].split()[0]


def test_an_operator_key_is_named_as_such(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "create", "ops", "--operator"]) == 0
    out = capsys.readouterr().out
    client_id, secret = created(out)
    assert "operator key" in out and store.admin_keys.is_admin(secret)
    assert main(["keys", "create", "app"]) == 0
    app_client, app_secret = created(capsys.readouterr().out)
    assert not store.admin_keys.is_admin(app_secret)

    assert main(["keys", "list", "--json"]) == 0
    listed = {k["client_id"]: k for k in json.loads(capsys.readouterr().out)}
    assert listed[client_id]["operator"] is True and listed[app_client]["operator"] is False
    assert listed[app_client]["scope"] == "admin"  # a client's first key: its admin scope
    assert main(["keys", "list"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == [
        "KEY", "CLIENT", "SCOPE", "OPERATOR", "STATUS", "EXPIRES", "NAME"
    ]  # fmt: skip
    assert f"{listed[client_id]['id']}  {client_id}  admin  yes" in table


def test_admin_is_a_deprecated_alias_of_operator(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "create", "ops", "--admin"]) == 0
    captured = capsys.readouterr()
    assert "--admin is deprecated: it means --operator" in captured.err
    _, secret = created(captured.out)
    assert store.admin_keys.is_admin(secret)


def test_admin_is_hidden_from_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["keys", "create", "--help"])
    out = capsys.readouterr().out
    assert "--operator" in out and "--admin" not in out


def test_keys_create_records_the_new_keys_id(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "create", "ops", "--operator", "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["api_key"].startswith("wk_") and made["operator"] is True
    (entry,) = store.audit.list(made["client_id"])
    assert (entry.action, entry.target) == ("key.create", f"key:{made['key_id']}")
    assert entry.details["key_id"] == made["key_id"] == store.keys.list(made["client_id"])[0].id
    assert entry.details["operator"] is True and entry.actor.startswith("cli:")
    assert made["api_key"] not in json.dumps(entry.details)  # never the secret


def test_quota_show_of_an_unknown_client_fails(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["quota", "show", "client_nobody"]) == 3
    captured = capsys.readouterr()
    assert captured.err == "wonder: client client_nobody not found\n" and captured.out == ""
    assert main(["quota", "show", "client_nobody", "--user", "alice"]) == 3
    assert main(["keys", "create", "app"]) == 0
    client_id, _ = created(capsys.readouterr().out)
    assert main(["quota", "show", client_id]) == 0
    assert json.loads(capsys.readouterr().out) == {}  # a known client without limits


def test_library_apply_json(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lib = tmp_path / "lib"
    (lib / "personas").mkdir(parents=True)
    (lib / "personas" / "p.yaml").write_text("system_prompt: hi\n")
    assert main(["library", "apply", str(lib), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"applied": True, "directory": str(lib)}
    assert "1 objects, 1 new versions" in captured.err  # the listing is not on stdout

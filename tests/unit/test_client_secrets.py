"""Client secrets without Ray: sealing, versions, resolution, the key, references."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from core.client_secrets import (
    SecretBox,
    SecretsUnavailable,
    SecretUnreadable,
    ensure_key_file,
    load_box,
    names_a_secret,
    new_key_text,
    parse_key,
)
from core.errors import NotFound
from core.secret_vault import SecretVault
from core.settings import Settings
from core.store import Store


def _vault(tmp_path: Path, key: str | None = None) -> SecretVault:
    store = Store.open(f"sqlite:///{tmp_path / 'wonder.db'}")
    settings = Settings(data_dir=tmp_path, secrets_key=SecretStr(key) if key else None)
    return SecretVault(store, settings)


def test_a_sealed_value_opens_only_for_its_client_name_and_version() -> None:
    box = SecretBox(parse_key(new_key_text()))
    sealed = box.seal("v", "client_a", "token", 1)
    assert "v" != sealed and box.open(sealed, "client_a", "token", 1) == "v"
    for where in [("client_b", "token", 1), ("client_a", "other", 1), ("client_a", "token", 2)]:
        with pytest.raises(SecretUnreadable):
            box.open(sealed, *where)
    with pytest.raises(SecretUnreadable):
        SecretBox(parse_key(new_key_text())).open(sealed, "client_a", "token", 1)


def test_writes_rotate_versions_and_resolve_the_latest(tmp_path: Path) -> None:
    vault = _vault(tmp_path, new_key_text())
    assert vault.put("client_a", "token", "one", "client:client_a").version == 1
    rotated = vault.put("client_a", "token", "two", "client:client_a")
    assert rotated.version == 2 and rotated.rotated_by == "client:client_a"
    assert vault.resolve("client_a", "token", "test") == "two"
    with pytest.raises(NotFound):
        vault.resolve("client_b", "token", "test")  # another client's name means nothing
    failures = [e for e in vault.store.audit.list() if e.action == "secret.use_failed"]
    assert failures and failures[0].details["where"] == "test"
    assert "two" not in str(failures[0].model_dump())
    vault.delete("client_a", "token")
    with pytest.raises(NotFound):
        vault.resolve("client_a", "token", "test")


def test_without_a_key_writing_a_secret_says_how_to_set_one(tmp_path: Path) -> None:
    vault = _vault(tmp_path)
    with pytest.raises(SecretsUnavailable, match="WONDER_SECRETS_KEY"):
        vault.put("client_a", "token", "v", "client:client_a")


def test_the_key_file_is_made_once_with_mode_0600(tmp_path: Path) -> None:
    path = ensure_key_file(tmp_path / "data" / "secrets.key")
    first = path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_key_file(path).read_text() == first  # never overwritten
    box = load_box(Settings(data_dir=tmp_path / "data"))
    assert box is not None and box.key == parse_key(first)
    with pytest.raises(SecretsUnavailable, match="32 bytes"):
        load_box(Settings(data_dir=tmp_path, secrets_key=SecretStr("c2hvcnQ=")))


def test_the_key_never_travels_in_runtime_environments() -> None:
    settings = Settings(secrets_key=SecretStr(new_key_text()))
    assert "WONDER_SECRETS_KEY" not in settings.env()


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ({"secret": "x"}, True),
        ({"headers": {"a": {"secret": "x"}}}, True),
        ([{"api_key_secret": "x"}], True),
        ({"token": "x"}, False),
        ("secret", False),
    ],
)
def test_references_are_found_at_any_depth(value: object, names: bool) -> None:
    assert names_a_secret(value) is names

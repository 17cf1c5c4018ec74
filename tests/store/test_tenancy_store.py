"""Issue 13's storage on both backends: keys (found by secret and by id), libraries (the system's
and each client's), and conversation members; and an older database gaining the key columns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from core.access import Level
from core.conversations import create_conversation
from core.domain import Persona
from core.errors import NotFound
from core.keys import KeyScope, KeyStatus, hash_key
from core.store import Store
from core.store.library import SYSTEM, LatestVersion

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def test_keys(store: Store) -> None:
    key = store.keys.add("client_a", "wk_a", NOW, name="app", scope=KeyScope.APP)
    other = store.keys.add("client_b", "wk_b", NOW)
    assert store.keys.find("wk_a") == key and store.keys.get(other.id).scope == KeyScope.ADMIN
    with pytest.raises(NotFound):
        store.keys.get(key.id, "client_b")
    expiring = store.keys.expire(key.id, NOW + timedelta(hours=1))
    assert expiring.status(NOW) == KeyStatus.ACTIVE
    assert expiring.status(NOW + timedelta(hours=2)) == KeyStatus.EXPIRED
    assert store.keys.revoke(key.id, NOW).status(NOW) == KeyStatus.REVOKED
    assert set(store.keys.by_hashes([hash_key("wk_a"), hash_key("wk_b"), "x"])) == {
        hash_key("wk_a"),
        hash_key("wk_b"),
    }
    assert [k.id for k in store.keys.list("client_b")] == [other.id]


def test_libraries(store: Store) -> None:
    store.personas.put(Persona(id="shared", system_prompt="system"), NOW)
    store.personas.put(Persona(id="mine", system_prompt="a1"), NOW, owner="client_a")
    store.personas.put(Persona(id="mine", system_prompt="a2"), NOW, owner="client_a")
    store.personas.put(Persona(id="mine", system_prompt="b"), NOW, owner="client_b")
    assert store.personas.find("mine", client_id="client_a").obj.system_prompt == "a2"
    assert store.personas.find("mine", 1, client_id="client_a").obj.system_prompt == "a1"
    assert store.personas.find("mine", client_id="client_b").obj.version == 1
    assert store.personas.find("shared", client_id="client_a").owner == SYSTEM
    with pytest.raises(NotFound):
        store.personas.get("mine")  # not in the system library
    with pytest.raises(NotFound):
        store.personas.get("mine", client_id="client_c")
    listed = [(o.owner, o.obj.id) for o in store.personas.list_owned("client_a")]
    assert listed == [(SYSTEM, "shared"), ("client_a", "mine")]
    assert [p.version for p in store.personas.versions("mine", owner="client_a")] == [1, 2]


def test_library_versions(store: Store) -> None:
    """The latest version of named objects in a client's library and the system's, one row per
    library that holds one (what a conversation actor checks its cached setup with)."""
    store.personas.put(Persona(id="p", system_prompt="s1"), NOW)
    store.personas.put(Persona(id="p", system_prompt="s2"), NOW)
    store.personas.put(Persona(id="p", system_prompt="a"), NOW, owner="client_a")
    store.personas.put(Persona(id="p", system_prompt="b"), NOW, owner="client_b")
    store.personas.put(Persona(id="q", system_prompt="q"), NOW)
    found = store.library_versions.latest("client_a", [("persona", "p"), ("persona", "nope")])
    assert set(found) == {
        LatestVersion("client_a", "persona", "p", 1),
        LatestVersion(SYSTEM, "persona", "p", 2),
    }
    assert store.library_versions.latest("client_c", [("persona", "q"), ("task", "p")]) == [
        LatestVersion(SYSTEM, "persona", "q", 1)
    ]
    assert store.library_versions.latest("client_a", []) == []


def test_members(store: Store) -> None:
    parent = create_conversation(store, client_id="c")
    store.members.grant(parent.id, "ann", Level.OWNER, NOW)
    store.members.grant(parent.id, "bob", Level.READER, NOW, "ann")
    store.members.grant(parent.id, "bob", Level.WRITER, NOW, "ann")  # a change, not a second row
    child = create_conversation(store, client_id="c", started_by_conversation_id=parent.id)
    assert store.members.level(child.id, "bob") == Level.WRITER
    assert len(store.members.list(parent.id)) == 2
    assert {c.id for c in store.conversations.list("c", member="ann")} == {parent.id, child.id}
    assert store.members.revoke(parent.id, "bob") and store.members.level(parent.id, "bob") is None
    store.delete_conversation_tree(parent.id)
    assert store.members.list(child.id) == []


def test_an_older_api_keys_table_gains_the_new_columns(store_url: str) -> None:
    older = Store.open(store_url)
    with older.db.begin() as conn:
        conn.execute(text("DELETE FROM schema_info WHERE id = 2"))  # no schema fingerprint yet
        conn.execute(text("DROP TABLE api_keys"))
        conn.execute(
            text(
                "CREATE TABLE api_keys (key_hash VARCHAR(128) PRIMARY KEY, "
                "client_id VARCHAR(64) NOT NULL, created_at VARCHAR(40) NOT NULL)"
            )
        )
        conn.execute(
            text("INSERT INTO api_keys VALUES (:h, 'client_old', :at)"),
            {"h": hash_key("wk_old"), "at": NOW.isoformat()},
        )
    older.db.dispose()
    reopened = Store.open(store_url)
    try:
        found = reopened.keys.find("wk_old")
        assert found is not None and found.scope == KeyScope.ADMIN
        assert reopened.keys.revoke(found.id, NOW).status(NOW) == KeyStatus.REVOKED
    finally:
        reopened.db.dispose()

"""Users' access to conversations (issue 13): the rule as a table (level by action), and members
in the store — granted, revoked, copied to a child conversation, gone with the conversation."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.access import Action, Level, action_for_grant, allows
from core.conversations import create_conversation
from core.ids import utc_now
from core.store import Store

R, W, M, OWN = Level.READER, Level.WRITER, Level.MANAGER, Level.OWNER

# action → the levels that may do it (None: not a member)
TABLE: dict[Action, set[Level | None]] = {
    Action.READ: {R, W, M, OWN},
    Action.WRITE: {W, M, OWN},
    Action.MANAGE: {M, OWN},
    Action.DELETE: {OWN},
    Action.TRANSFER: {OWN},
}


@pytest.mark.parametrize("level", [None, R, W, M, OWN])
@pytest.mark.parametrize("action", list(Action))
def test_level_by_action(level: Level | None, action: Action) -> None:
    assert allows(level, action) == (level in TABLE[action])


@pytest.mark.parametrize(
    ("current", "wanted", "action"),
    [
        (None, R, Action.MANAGE),
        (R, M, Action.MANAGE),
        (M, None, Action.MANAGE),
        (None, OWN, Action.TRANSFER),
        (M, OWN, Action.TRANSFER),
        (OWN, M, Action.TRANSFER),
        (OWN, None, Action.TRANSFER),
    ],
)
def test_what_a_grant_needs(current: Level | None, wanted: Level | None, action: Action) -> None:
    assert action_for_grant(current, wanted) == action


def test_levels_parse_and_refuse_unknown_names() -> None:
    assert Level.parse("Manager") == M and M.label == "manager"
    with pytest.raises(ValueError, match="one of reader, writer, manager, owner"):
        Level.parse("admin")


def test_members_are_copied_to_children_and_deleted_with_the_tree(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'w.db'}")
    parent = create_conversation(store, client_id="c")
    now = utc_now()
    store.members.grant(parent.id, "ann", OWN, now)
    store.members.grant(parent.id, "bob", R, now, granted_by="ann")
    child = create_conversation(store, client_id="c", started_by_conversation_id=parent.id)
    assert [(m.user_id, m.level) for m in store.members.list(child.id)] == [
        ("ann", "owner"),
        ("bob", "reader"),
    ]
    assert store.members.revoke(parent.id, "bob") and not store.members.revoke(parent.id, "bob")
    assert store.members.level(parent.id, "bob") is None
    assert store.members.level(child.id, "bob") == R  # the child's copy is its own
    assert [c.id for c in store.conversations.list("c", member="bob")] == [child.id]
    store.delete_conversation_tree(parent.id)
    assert store.members.list(child.id) == [] and store.members.list(parent.id) == []

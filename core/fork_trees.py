"""Fork trees in listings (seed 003, ``mode=latest-fork``): a conversation and every fork made
from it or from its forks form one tree (its root is the first conversation of a fork's
lineage); the listing shows, of each tree, only its latest conversation among those the caller
sees and the listing's other filters keep.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from core.domain import Conversation
from core.store import Store

SCAN_BATCH = 200


def fork_root(store: Store, conversation: Conversation) -> str:
    """The root of the conversation's fork tree (itself when it is no fork)."""
    if conversation.forked_from_conversation_id is None:
        return conversation.id
    lineage = store.forks.lineage(conversation.id)
    return lineage[0].conversation_id if lineage else conversation.forked_from_conversation_id


@dataclass
class LatestForks:
    """Which listed conversations are the latest of their fork tree, for one listing's filters
    (the answer per tree is kept for the listing's request)."""

    store: Store
    client_id: str
    member: str | None
    ancestry: str
    _latest: dict[str, str] = field(default_factory=dict)  # root → latest id

    def is_latest(self, conversation: Conversation) -> bool:
        root = fork_root(self.store, conversation)
        if root not in self._latest:
            members = [root, *self.store.forks.tree(root, self.client_id)]
            seen = self.store.conversations.list(
                self.client_id,
                limit=len(members),
                member=self.member,
                ids=members,
                ancestry=self.ancestry,
            )
            self._latest[root] = seen[-1].id if seen else ""
        return self._latest[root] == conversation.id

    def page(self, after: tuple[str, str] | None, limit: int) -> list[Conversation]:
        """Up to ``limit + 1`` latest conversations after ``after``, in (created_at, id) order."""
        kept: list[Conversation] = []
        for conversation in self._scan(after):
            if self.is_latest(conversation):
                kept.append(conversation)
                if len(kept) > limit:
                    break
        return kept

    def _scan(self, after: tuple[str, str] | None) -> Iterator[Conversation]:
        while True:
            batch = self.store.conversations.list(
                self.client_id,
                limit=SCAN_BATCH,
                after=after,
                member=self.member,
                ancestry=self.ancestry,
            )
            yield from batch
            if len(batch) < SCAN_BATCH:
                return
            after = (batch[-1].created_at.isoformat(), batch[-1].id)

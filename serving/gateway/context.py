"""What the gateway's routes work with: the store, and access to Conversation actors.

``ConversationAccess`` is the part of ``cluster.actors`` the gateway uses (docs/contracts.md). The
deployment passes ``ClusterConversations``, which reaches the real actors; tests without Ray pass a
fake with the same interface.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.requests import HTTPConnection

from core.store import Store


class ConversationAccess(Protocol):
    async def post_message(
        self,
        conversation_id: str,
        content: str,
        author: str,
        *,
        source: str = "human",
        reply_to_message_id: str | None = None,
    ) -> dict[str, Any]: ...

    def stream_events(
        self, conversation_id: str, after_seq: int
    ) -> AsyncIterator[dict[str, Any]]: ...

    async def complete_conversation(self, conversation_id: str) -> None: ...

    async def stop_conversations(self, conversation_ids: list[str]) -> None: ...


class ClusterConversations:
    """``ConversationAccess`` through ``cluster.actors`` (imported on first use: it needs Ray)."""

    async def post_message(
        self,
        conversation_id: str,
        content: str,
        author: str,
        *,
        source: str = "human",
        reply_to_message_id: str | None = None,
    ) -> dict[str, Any]:
        from cluster import actors

        return await actors.post_message(
            conversation_id,
            content,
            author,
            source=source,
            reply_to_message_id=reply_to_message_id,
        )

    def stream_events(self, conversation_id: str, after_seq: int) -> AsyncIterator[dict[str, Any]]:
        from cluster import actors

        return actors.stream_events(conversation_id, after_seq)

    async def complete_conversation(self, conversation_id: str) -> None:
        from cluster import actors

        await actors.complete_conversation(conversation_id)

    async def stop_conversations(self, conversation_ids: list[str]) -> None:
        from cluster import actors

        await actors.stop_conversations(conversation_ids)


@dataclass(frozen=True)
class GatewayContext:
    """Everything a request handler needs, built once per replica."""

    store: Store
    conversations: ConversationAccess
    settings_env: dict[str, str] = field(default_factory=dict)


def get_context(connection: HTTPConnection) -> GatewayContext:
    """FastAPI dependency: the context of the app serving this request or WebSocket."""
    context: GatewayContext = connection.app.state.gateway
    return context

"""Conversation export and import: one JSON bundle (docs/observability.md).

``GET /v1/conversations/{id}/export`` returns the conversation's bundle (``core.
conversation_bundle``): its ended turns, messages, moves and model calls, bodies inline; access
is the conversation's (a client reads only its own; with an acting user, the member check of
every ``/v1/conversations/{id}`` route applies). ``POST /v1/conversation-imports`` makes a new
conversation of the calling client from a bundle: validated (its schema, then its consistency),
every id new, agent ids the client does not own dropped, the log written once by the import
before any actor exists (``core.conversation_bundle_store``). The body is bounded
(``serving.gateway.limits``), and so are a bundle's lists.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from pydantic import Field

from core.conversation_bundle import ConversationBundle, check_bundle, plan_import
from core.conversation_bundle_store import export_bundle, write_import
from core.domain import Conversation
from core.errors import NotFound, WonderError
from core.ids import new_id, new_id_after, utc_now
from core.memory.objects import ObjectStore, open_object_store
from serving.gateway.auth import ClientId, Context, Guard, User
from serving.gateway.context import GatewayContext
from serving.gateway.members import start_owner
from serving.gateway.protocol import WireModel

router = APIRouter(prefix="/v1", tags=["conversations"])


class ConversationImport(WireModel):
    """A bundle to import, and who answers in the imported conversation from now on."""

    bundle: ConversationBundle
    agent_id: str | None = Field(
        None,
        max_length=64,
        description="This client's agent that answers from now on (default: the bundle's "
        "agent, when this client has an agent of that id)",
    )
    title: str | None = Field(None, max_length=200, description="Default: the bundle's title")


class ConversationImported(WireModel):
    conversation: Conversation
    turn_ids: dict[str, str] = Field(
        description="The bundle's turn ids and the imported turns' ids"
    )
    messages: int
    moves: int
    model_calls: int


def _objects(context: GatewayContext) -> ObjectStore | None:
    settings = context.settings
    try:
        return open_object_store(settings.resolved_object_uri, settings.s3_endpoint_url)
    except (WonderError, OSError, ValueError):
        return None  # a call whose body was offloaded is exported with its reference


@router.get(
    "/conversations/{conversation_id}/export",
    response_model=ConversationBundle,
    summary="The conversation as one JSON bundle: its ended turns, messages, moves and model calls",
)
async def export_conversation(
    conversation_id: str, context: Context, client_id: ClientId
) -> ConversationBundle:
    return await asyncio.to_thread(
        export_bundle, context.store, conversation_id, client_id, _objects(context)
    )


@router.post(
    "/conversation-imports",
    status_code=201,
    response_model=ConversationImported,
    summary="A new conversation with the history of an exported bundle (every id new)",
)
async def import_conversation(
    body: ConversationImport, context: Context, client_id: ClientId, guard: Guard, user: User
) -> ConversationImported:
    check_bundle(body.bundle)
    await asyncio.to_thread(guard.admit_conversation, client_id)
    own = {agent.id for agent in context.store.agents.list_for_client(client_id)}
    if body.agent_id is not None and body.agent_id not in own:
        raise NotFound(f"agent_id: agent {body.agent_id} not found")
    at = utc_now()
    plan = plan_import(
        body.bundle,
        client_id=client_id,
        conversation_id=new_id("conv"),  # never a reserved actor's: none may exist for it yet
        agent_id=body.agent_id,
        own_agents=own,
        title=body.title,
        at=at,
        ids=new_id_after,
    )

    def write() -> None:
        with context.store.db.begin() as conn:
            write_import(context.store, plan, conn)
            start_owner(context.store, plan.conversation.id, user, at, conn)

    await asyncio.to_thread(write)
    return ConversationImported(
        conversation=plan.conversation,
        turn_ids=plan.turn_ids,
        messages=len(plan.messages),
        moves=len(plan.moves),
        model_calls=len(plan.model_calls),
    )

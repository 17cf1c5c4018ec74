"""Threads (seed 004): ``GET /v1/threads/{turn_id}``, a turn with its ancestry (core.threads)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from core.domain import Message, Persona
from core.threads import thread_of
from serving.gateway.auth import ClientId, Context
from serving.gateway.protocol import WireModel

router = APIRouter(prefix="/v1/threads", tags=["threads"])


class ThreadOut(WireModel):
    turn_id: str
    conversation_id: str = Field(description="The conversation the turn ran in")
    ancestry: list[str] = Field(
        description="Turn ids from the root to this turn (parent_turn_id chain; crosses into the "
        "source of a fork)"
    )
    ancestry_conversations: list[str] = Field(
        description="The conversation of each turn in ancestry"
    )
    depth: int = Field(description="Turns in the thread (a root turn's thread: 1)")
    total_tokens: int = Field(description="Prompt + completion tokens of every turn in it")
    has_children: bool = Field(
        description="A turn continues from this one, or a fork was made at it (not a session tip)"
    )
    persona: Persona | None = Field(description="The persona of the agent that ran the turn")
    messages: list[Message] = Field(description="The thread's messages, in order")


@router.get(
    "/{turn_id}",
    response_model=ThreadOut,
    summary="A thread: the turn with its ancestry, depth, tokens, children flag, persona, messages",
)
async def get_thread(turn_id: str, context: Context, client_id: ClientId) -> ThreadOut:
    thread = await run_in_threadpool(thread_of, context.store, turn_id, client_id)
    return ThreadOut(
        turn_id=thread.turn.id,
        conversation_id=thread.turn.conversation_id,
        ancestry=[t.id for t in thread.ancestry],
        ancestry_conversations=[t.conversation_id for t in thread.ancestry],
        depth=len(thread.ancestry),
        total_tokens=thread.total_tokens,
        has_children=thread.has_children,
        persona=thread.persona,
        messages=thread.messages,
    )

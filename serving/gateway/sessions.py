"""Sessions and routing (seed 004): ``/v1/sessions/{label}`` and ``POST /v1/messages`` with a
routing target (``core.sessions`` holds the rules)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar

from fastapi import APIRouter, Path, Query
from pydantic import Field, field_validator
from starlette.concurrency import run_in_threadpool

from core.domain import ConversationStatus
from core.errors import Conflict
from core.route_model import RouteDecision
from core.routes import Route
from core.sessions import Session, create_session, get_session, makes_conversation, route
from core.smart_routing import DEFAULT_MIN_SCORE, smart_route
from serving.gateway.audit_trail import Audit
from serving.gateway.auth import ClientId, Context, Guard, User
from serving.gateway.context import GatewayContext
from serving.gateway.messages import accept_message, check_author
from serving.gateway.protocol import (
    LABEL_PATTERN,
    Deleted,
    MessageCreate,
    OneOfFields,
    RouteTarget,
    WireModel,
)
from serving.gateway.quota_checks import QuotaGuard, admit_turn

router = APIRouter(tags=["sessions"])

Label = Annotated[str, Path(pattern=LABEL_PATTERN, description="A session label")]


class SessionOut(WireModel):
    label: str
    conversation_id: str
    head_turn_id: str | None = Field(description="The conversation's latest turn: the tip")
    created_at: datetime


class SessionCreate(OneOfFields):
    """Exactly one of ``conversation_id`` (an existing conversation) or ``agent_id`` (a new one)."""

    one_of = ("conversation_id", "agent_id")

    conversation_id: str | None = Field(None, max_length=64)
    agent_id: str | None = Field(None, max_length=64)


class SessionPage(WireModel):
    items: list[SessionOut]
    next_after: str | None = Field(None, description="Pass as after for the next page")


class AutoRoute(WireModel):
    """Smart routing: the conversation whose recent messages the message matches best."""

    min_score: float = Field(
        DEFAULT_MIN_SCORE,
        ge=-1.0,
        le=1.0,
        description="The best candidate's cosine similarity must reach this to be chosen",
    )
    candidates: int = Field(50, ge=1, le=200, description="Conversations weighed, at most")
    fallback: RouteTarget | None = Field(
        None, description="Where the message goes when no candidate reaches min_score"
    )


class RoutedTarget(RouteTarget):
    """A thread, a session, a persona, or ``auto`` (``true``, or its options)."""

    one_of: ClassVar[tuple[str, ...]] = ("thread", "session", "persona", "auto")

    auto: AutoRoute | None = Field(
        None, description="Smart routing: true, or {min_score, candidates, fallback}"
    )

    @field_validator("auto", mode="before")
    @classmethod
    def _true_is_defaults(cls, value: Any) -> Any:
        if value is True:
            return {}
        if value is False:
            raise ValueError("auto: true, or an object of options (leave it out otherwise)")
        return value


class RoutedMessageCreate(MessageCreate):
    to: RoutedTarget


class MessageRouted(WireModel):
    conversation_id: str
    turn_id: str
    message_id: str
    seq: int | None = None
    forked: bool = Field(
        description="Routing to a thread that is not its conversation's tip "
        "forked the conversation at it: conversation_id is the fork"
    )
    session: str | None = Field(None, description="The session it went to, if any")
    routing: RouteDecision | None = Field(
        None,
        description="auto: the candidates' scores and the one chosen (also stored with the "
        "message); pass an explicit target instead to overrule it",
    )


def _out(session: Session) -> SessionOut:
    return SessionOut(
        label=session.label,
        conversation_id=session.conversation_id,
        head_turn_id=session.head_turn_id,
        created_at=session.created_at,
    )


@router.put(
    "/v1/sessions/{label}",
    status_code=201,
    response_model=SessionOut,
    summary="Create a session: a label for an existing conversation, or a new one with an agent",
)
def put_session(
    label: Label,
    body: SessionCreate,
    context: Context,
    client_id: ClientId,
    user: User,
    audit: Audit,
) -> SessionOut:
    session = create_session(
        context.store,
        client_id,
        label,
        conversation_id=body.conversation_id,
        agent_id=body.agent_id,
        user=user,
    )
    details = {"label": label, "conversation_id": session.conversation_id}
    audit.record("session.create", f"session:{label}", details)
    return _out(session)


@router.get("/v1/sessions/{label}", response_model=SessionOut, summary="Get a session and its head")
def read_session(label: Label, context: Context, client_id: ClientId) -> SessionOut:
    return _out(get_session(context.store, client_id, label))


@router.get("/v1/sessions", response_model=SessionPage, summary="List sessions by label")
def list_sessions(
    context: Context,
    client_id: ClientId,
    user: User,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    after: Annotated[str | None, Query(pattern=LABEL_PATTERN)] = None,
) -> SessionPage:
    # With a user, only the sessions of conversations it is a member of.
    rows = context.store.session_labels.list(client_id, after=after, limit=limit + 1, member=user)
    items = [_out(get_session(context.store, client_id, r.label)) for r in rows[:limit]]
    return SessionPage(items=items, next_after=items[-1].label if len(rows) > limit else None)


@router.delete(
    "/v1/sessions/{label}",
    response_model=Deleted,
    summary="Delete a session label (its conversation stays)",
)
def delete_session(label: Label, context: Context, client_id: ClientId, audit: Audit) -> Deleted:
    session = get_session(context.store, client_id, label)
    context.store.session_labels.delete(client_id, label)
    details = {"label": label, "conversation_id": session.conversation_id}
    audit.record("session.delete", f"session:{label}", details)
    return Deleted(deleted=[label])


@router.post(
    "/v1/messages",
    status_code=202,
    response_model=MessageRouted,
    summary="Send a message routed to a thread, a session or a persona; says where it went",
)
async def post_routed(
    body: RoutedMessageCreate, context: Context, client_id: ClientId, guard: Guard, user: User
) -> MessageRouted:
    await admit_turn(guard, client_id, body.user_id or user)
    message = MessageCreate.model_validate(body.model_dump(exclude={"to"}))
    if body.to.auto is not None:
        return await send_auto(context, guard, client_id, body.to.auto, message, user)
    return await send_routed(context, guard, client_id, body.to.as_route(), message, user)


async def send_auto(
    context: GatewayContext,
    guard: QuotaGuard,
    client_id: str,
    auto: AutoRoute,
    message: MessageCreate,
    user: str | None,
) -> MessageRouted:
    """Smart routing (``core.smart_routing``): the best-matching conversation, else the
    fallback; the decision goes with the message."""
    check_author(message, user)
    embedder = (await context.memory.service()).embedder
    decision = await smart_route(
        context.store, embedder, client_id, message.content, auto.min_score, auto.candidates, user
    )
    if decision.chosen is None:
        if auto.fallback is None:
            best = decision.candidates[0].score if decision.candidates else None
            told = "no candidate" if best is None else f"the best scored {best:.3f}"
            raise Conflict(
                f"to.auto: no conversation matches this message ({told}, min_score "
                f"{auto.min_score}); give to.auto.fallback, or a thread, session or persona"
            )
        to = auto.fallback.as_route()
        return await send_routed(context, guard, client_id, to, message, user, decision=decision)
    chosen = decision.chosen.conversation_id
    conversation = await run_in_threadpool(context.store.conversations.get, chosen)
    if conversation.status == ConversationStatus.COMPLETED:
        raise Conflict(f"conversation {conversation.id} is completed")
    accepted = await accept_message(context, client_id, chosen, message, user, decision=decision)
    return MessageRouted(
        conversation_id=chosen,
        turn_id=accepted.turn_id,
        message_id=accepted.message_id,
        seq=accepted.seq,
        forked=False,
        session=decision.chosen.session,
        routing=decision,
    )


async def send_routed(
    context: GatewayContext,
    guard: QuotaGuard,
    client_id: str,
    to: Route,
    message: MessageCreate,
    user: str | None = None,
    *,
    author: str | None = None,
    decision: RouteDecision | None = None,
) -> MessageRouted:
    """Resolve the target (forking, or making a main session, as needed: counted against the
    client's conversations quota) and post the message as ``user`` (``core.sessions.route``).
    ``author``: the platform posting for ``user`` (a webhook)."""
    if author is None:
        check_author(message, user)  # before routing makes anything
    if await run_in_threadpool(makes_conversation, context.store, client_id, to):
        await run_in_threadpool(guard.admit_conversation, client_id)
    destination = await run_in_threadpool(route, context.store, client_id, to.kind, to.target, user)
    conversation = await run_in_threadpool(
        context.store.conversations.get, destination.conversation_id
    )
    if conversation.status == ConversationStatus.COMPLETED:
        raise Conflict(f"conversation {conversation.id} is completed")
    accepted = await accept_message(
        context,
        client_id,
        conversation.id,
        message,
        user,
        author=author,
        decision=decision,
    )
    return MessageRouted(
        conversation_id=conversation.id,
        turn_id=accepted.turn_id,
        message_id=accepted.message_id,
        seq=accepted.seq,
        forked=destination.forked,
        session=destination.session,
        routing=decision,
    )

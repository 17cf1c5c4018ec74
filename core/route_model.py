"""How a message found its conversation and what it may do there, as stored with the message
(``message_routes``): a smart routing decision with the candidates' scores (``core.smart_routing``)
and a permissions override for its turn (seed 004 ``RoutingTarget.permissions``)."""

from __future__ import annotations

from pydantic import Field

from core.domain import Model

NameList = list[str]


class ToolPermissions(Model):
    """Narrows the persona's tools for one turn: it can take tools away, never add any."""

    allow: NameList | None = Field(
        None, max_length=128, description="Only these tools (None: the persona's)"
    )
    deny: NameList = Field(default_factory=list, max_length=128, description="Never these")


class MessagePermissions(Model):
    tools: ToolPermissions = Field(default_factory=ToolPermissions)


class RouteCandidate(Model):
    """A conversation smart routing weighed: its tip, and how well it matched the message."""

    conversation_id: str
    turn_id: str | None = Field(description="Its tip: the thread the message would continue")
    session: str | None = None
    title: str | None = None
    score: float = Field(description="Cosine similarity of the message to its best match (-1..1)")


class RouteDecision(Model):
    """What smart routing chose, among which candidates (best first), and why."""

    mode: str = "auto"
    chosen: RouteCandidate | None = Field(
        description="The best candidate at or over min_score; None: the fallback was taken"
    )
    candidates: list[RouteCandidate] = Field(default_factory=list)
    min_score: float
    fallback: bool = False


class MessageRoute(Model):
    """Stored with a message (before it is posted): its routing decision and permissions."""

    message_id: str
    conversation_id: str
    decision: RouteDecision | None = None
    permissions: MessagePermissions | None = None

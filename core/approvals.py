"""Tool calls that wait for a person's approval, as the conversation's log records them.

A persona (``constraints.approvals``) or a tool (``approval``) may say that a tool's calls wait
for a person before they run. The conversation's actor, the log's one writer, records each wait
as an ``approval.requested`` event and each decision as an ``approval.decided`` event; everything
else reads those: the gateway's approvals routes (what is pending, whether one is decided), the
stream (the events are its frames), and the actor itself when it restarts (the waits it rebuilds).
The records here are those events' payloads, read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import Field

from core.domain import Event, Model
from core.jsontypes import JsonObject

REQUESTED = "approval.requested"
DECIDED = "approval.decided"
EVENT_TYPES = (REQUESTED, DECIDED)

Decision = Literal["approve", "deny", "edit"]
TIMEOUT = "timeout"  # who decided when nobody did in time


class RecordedCall(Model):
    """A tool call as the model made it (OpenAI's shape: arguments are JSON text)."""

    id: str
    name: str
    arguments: str


class ApprovalRequested(Model):
    """``approval.requested``: one tool call waits; with the whole answer it belongs to (its
    ``calls``, ``reasoning``, ``iteration`` and async ``operation_ids``, one per call), so a
    restarted conversation plans the answer again and waits for what is still undecided."""

    turn_id: str
    approval_id: str
    tool_call_id: str
    tool: str
    arguments: JsonObject
    timeout_s: int
    on_timeout: Literal["deny", "approve"]
    requested_at: datetime
    expires_at: datetime
    iteration: int
    reasoning: str = ""
    calls: list[RecordedCall] = Field(default_factory=list)
    operation_ids: list[str] = Field(default_factory=list)


class ApprovalDecided(Model):
    """``approval.decided``: what became of one waiting call, and who decided (a user, the
    client's key, or ``timeout``)."""

    turn_id: str
    approval_id: str
    decision: Decision
    arguments: JsonObject | None = None  # the edited arguments (``edit``)
    reason: str | None = None
    decided_by: str
    decided_at: datetime


class PendingApproval(Model):
    """A tool call waiting for a decision, as the API shows it."""

    approval_id: str
    turn_id: str
    tool_call_id: str
    tool: str
    arguments: JsonObject
    timeout_s: int
    on_timeout: Literal["deny", "approve"]
    requested_at: datetime
    expires_at: datetime


class ApprovalOutcome(Model):
    """The answer to a decision: the call it was about and what it became."""

    approval_id: str
    turn_id: str
    tool: str
    decision: Decision
    arguments: JsonObject = Field(description="The arguments the call runs with (none if denied)")


class ApprovalLog:
    """Every approval of a conversation's log (its ``approval.*`` events, in order)."""

    def __init__(self, events: Sequence[Event]) -> None:
        self.requested: dict[str, ApprovalRequested] = {}
        self.decided: dict[str, ApprovalDecided] = {}
        for event in events:
            if event.type == REQUESTED:
                requested = ApprovalRequested.model_validate(event.payload)
                self.requested[requested.approval_id] = requested
            elif event.type == DECIDED:
                decided = ApprovalDecided.model_validate(event.payload)
                self.decided[decided.approval_id] = decided

    def pending(self, active_turns: frozenset[str]) -> list[PendingApproval]:
        """The undecided requests of turns still active, oldest first."""
        return [
            shown(requested)
            for approval_id, requested in self.requested.items()
            if approval_id not in self.decided and requested.turn_id in active_turns
        ]


def shown(requested: ApprovalRequested) -> PendingApproval:
    return PendingApproval(
        approval_id=requested.approval_id,
        turn_id=requested.turn_id,
        tool_call_id=requested.tool_call_id,
        tool=requested.tool,
        arguments=requested.arguments,
        timeout_s=requested.timeout_s,
        on_timeout=requested.on_timeout,
        requested_at=requested.requested_at,
        expires_at=requested.expires_at,
    )

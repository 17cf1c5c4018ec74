"""The conversation's own record as its turns leave it (seed 001 "Conversation"). Pure.

After every batch of decisions, ``planning`` asks ``mark`` whether the conversation row changes:
its ``status`` (``conversation_status``) and the users who joined by speaking. The answer is one
``MarkConversation`` decision (or none), with no event of its own: the batch's own events
(``message``, ``tools.started``, ``turn.awaiting``, ``move``, ``turn.*``) already say it.
docs/architecture.md, "The conversation's status and participants follow its turns", has the rules.
"""

from __future__ import annotations

from typing import assert_never

from actors.conversation.domain import (
    ApprovalDecided,
    ApprovalTimedOut,
    CancelRequested,
    CompleteTurn,
    CompletionRequested,
    ContextAssembled,
    ContextAssemblyFailed,
    ConversationEvent,
    ConversationState,
    Decision,
    FailTurn,
    MarkConversation,
    MemoriesExtracted,
    MemoryExtractionFailed,
    MessageReceived,
    ModelAnswered,
    ModelFailed,
    OperationCompleted,
    OperationsChecked,
    ParticipantAdded,
    ParticipantRemoved,
    PolicySet,
    Recovered,
    Refuse,
    StepFailed,
    ToolsReturned,
    TurnPhase,
    TurnRequested,
)
from core.domain import (
    AgentCaller,
    Caller,
    ConversationStatus,
    MessageSource,
    Participant,
    UserCaller,
    WorkflowCaller,
)

WAITING_PHASES = frozenset({TurnPhase.ACTING, TurnPhase.APPROVING, TurnPhase.AWAITING})


def conversation_status(
    state: ConversationState, ended: CompleteTurn | FailTurn | None
) -> ConversationStatus:
    """What the conversation is doing, from its live turns (seed 001's statuses): ``waiting``
    while every live turn waits on work outside it (its tool calls: a task, a delegated agent, a
    workflow, a person's approval; its async operations), ``active`` while any does its own work
    (context, model, extraction, queued) or once a turn ends well, ``failed`` once the last turn
    to end (``ended``) failed and nothing is live; a cancelled turn is no failure. ``completed``
    (a user's decision) stays; without a live turn or an ending, ``failed`` stays too."""
    current = state.conversation.status
    if current is ConversationStatus.COMPLETED:
        return current
    live = list(state.turns.values())
    if live:
        waiting = all(turn.phase in WAITING_PHASES for turn in live)
        return ConversationStatus.WAITING if waiting else ConversationStatus.ACTIVE
    match ended:
        case FailTurn(cancelled=False):
            return ConversationStatus.FAILED
        case FailTurn() | CompleteTurn():
            return ConversationStatus.ACTIVE
        case None:
            failed = current is ConversationStatus.FAILED
            return ConversationStatus.FAILED if failed else ConversationStatus.ACTIVE
        case _:
            assert_never(ended)


def mark(
    event: ConversationEvent, decisions: list[Decision], after: ConversationState
) -> MarkConversation | None:
    """The row's change once ``decisions`` (taken for ``event``) have left the conversation
    ``after``: none when neither its status nor its participants change."""
    status = conversation_status(after, _last_ending(decisions))
    known = {(p.type, p.id) for p in after.conversation.participants}
    joined: list[Participant] = []
    for speaker in _speakers(event):
        if (speaker.type, speaker.id) not in known:
            known.add((speaker.type, speaker.id))
            joined.append(speaker)
    if status is after.conversation.status and not joined:
        return None
    return MarkConversation(status, tuple(joined))


def refused(decisions: list[Decision]) -> bool:
    """Whether the batch refuses its event (then nothing about the conversation changes)."""
    for decision in decisions:
        match decision:
            case Refuse():
                return True
            case _:
                pass
    return False


def _last_ending(decisions: list[Decision]) -> CompleteTurn | FailTurn | None:
    last: CompleteTurn | FailTurn | None = None
    for decision in decisions:
        match decision:
            case CompleteTurn() | FailTurn():
                last = decision
            case _:
                pass
    return last


def _speakers(event: ConversationEvent) -> list[Participant]:
    """The users whose words ``event`` brings in: a person's message (``source`` human) makes
    its author a participant; triggers, webhooks, agents and workflows do not."""
    match event:
        case MessageReceived(caller=caller, source=source):
            return _person(caller, source)
        case TurnRequested(turn=turn):
            return _person(turn.caller, turn.source)
        case Recovered(turns=turns):
            return [p for t in turns for p in _person(t.turn.caller, t.turn.source)]
        case (
            ContextAssembled()
            | ContextAssemblyFailed()
            | ModelAnswered()
            | ModelFailed()
            | ToolsReturned()
            | MemoriesExtracted()
            | MemoryExtractionFailed()
            | CancelRequested()
            | StepFailed()
            | OperationCompleted()
            | OperationsChecked()
            | ApprovalDecided()
            | ApprovalTimedOut()
            | ParticipantAdded()
            | ParticipantRemoved()
            | PolicySet()
            | CompletionRequested()
        ):
            return []
        case _:
            assert_never(event)


def _person(caller: Caller, source: MessageSource | None) -> list[Participant]:
    match caller:
        case UserCaller(user_id=user_id) if source in (None, "human"):
            return [Participant(type="user", id=user_id)]
        case UserCaller() | AgentCaller() | WorkflowCaller():
            return []
        case _:
            assert_never(caller)

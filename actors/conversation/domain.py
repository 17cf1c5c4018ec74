"""What the Conversation's planning reasons about: turn progress, events in, decisions out.

Events are past tense (what happened), decisions are imperatives (what to do next). Ids and times
arrive inside events so that planning stays pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.domain import Tool, ToolResult
from core.llm.protocol import ToolCallRequested

JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class TurnProgress:
    """A running turn as planning sees it: the request so far and the moves made."""

    turn_id: str
    moves_made: int = 0
    # OpenAI-shaped messages this turn added after context assembly (assistant tool calls, results).
    transcript: tuple[JsonObject, ...] = ()


# --------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class ModelAnswered:
    """The model finished a call: text and/or tool calls."""

    text: str
    tool_calls: tuple[ToolCallRequested, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolsReturned:
    """Every tool call of the last model answer has a result (dispatched or refused)."""

    calls: tuple[ToolCallRequested, ...]
    results: tuple[ToolResult, ...]


ConversationEvent = ModelAnswered | ToolsReturned


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class DispatchTool:
    """Run a valid tool call on its target (task, workflow or agent)."""

    call: ToolCallRequested
    tool: Tool
    input: JsonObject


@dataclass(frozen=True, slots=True)
class ReturnToolError:
    """Answer a tool call with a business error without dispatching it (bad input, denied...)."""

    call: ToolCallRequested
    result: ToolResult


@dataclass(frozen=True, slots=True)
class CallModel:
    """Ask the model again; ``tools_allowed`` is False once the move budget is spent."""

    transcript: tuple[JsonObject, ...]
    tools_allowed: bool = True


@dataclass(frozen=True, slots=True)
class AppendAgentMessage:
    content: str


@dataclass(frozen=True, slots=True)
class CompleteTurn:
    """The agent answered and nothing is pending: extract memories, then complete."""


@dataclass(frozen=True, slots=True)
class AwaitOperations:
    """The agent answered, but async operations of this turn are still out: keep it active."""


@dataclass(frozen=True, slots=True)
class FailTurn:
    reason: str


Decision = (
    DispatchTool
    | ReturnToolError
    | CallModel
    | AppendAgentMessage
    | AwaitOperations
    | CompleteTurn
    | FailTurn
)


@dataclass(frozen=True, slots=True)
class ToolCatalog:
    """The tools a turn may use, by the name the model sees, plus the persona's permissions."""

    by_name: dict[str, Tool] = field(default_factory=dict)
    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    allowed_agents: tuple[str, ...] | None = None

    def permitted(self, name: str) -> bool:
        if name in self.deny:
            return False
        return self.allow is None or name in self.allow

    def visible(self) -> list[Tool]:
        return [tool for name, tool in sorted(self.by_name.items()) if self.permitted(name)]

"""What a model call's context window held: a recorded request split into its parts (system
prompt, memories, other assembled context, history, tool specs), each with a token count.

Pure. The counts are estimates (``ESTIMATE``: about four characters a token, the usual rule for
BPE tokenizers on English text) unless the model's own count is known: the call's recorded
``prompt_tokens`` is reported beside them, and the window is the served model's context length
where the deployment states one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from core.domain import Model
from core.jsontypes import JsonObject
from core.memory.context import MEMORIES_TITLE, PENDING_TITLE, TOOLS_TITLE

SectionName = Literal["system_prompt", "memories", "assembled_context", "history", "tool_specs"]
CountMethod = Literal["estimate"]

ESTIMATE: CountMethod = "estimate"
CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
"""Each chat message's role and separators (chat templates add a few tokens per message)."""

LABELS: dict[SectionName, str] = {
    "system_prompt": "System prompt",
    "memories": "Memories",
    "assembled_context": "Other assembled context (work in progress, tool list, hooks)",
    "history": "History (the conversation's messages, the current one last)",
    "tool_specs": "Tool specs",
}


class ContextSection(Model):
    name: SectionName
    label: str
    tokens: int = Field(description="Estimated tokens (see counted_by)")
    chars: int
    items: int = Field(description="Messages, memories or tools in the section")
    text: str = Field(description="What the section holds, as sent (tool specs as JSON)")


class ContextWindow(Model):
    """``GET .../calls/{call_id}/context``."""

    call_id: str
    provider: str
    model: str
    counted_by: CountMethod = Field(
        description="estimate: about four characters a token (no tokenizer in the gateway)"
    )
    sections: list[ContextSection]
    total_tokens: int = Field(description="The sections' estimates summed")
    reported_prompt_tokens: int | None = Field(
        None, description="The prompt tokens the model itself reported for the call"
    )
    window: int | None = Field(
        None, description="The model's context length where the deployment states one"
    )
    max_tokens: int | None = Field(None, description="The completion budget the request asked for")


def estimate_tokens(text: str) -> int:
    """About four characters a token; never zero for a non-empty text."""
    return math.ceil(len(text) / CHARS_PER_TOKEN) if text else 0


def _content(message: JsonObject) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: their text
        return "\n".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return "" if content is None else json.dumps(content)


def split_system(system: str) -> tuple[str, str, str, int]:
    """The system message's persona prompt, memories block, the rest of the assembled context,
    and how many memories the block lists."""
    prompt: list[str] = []
    memories: list[str] = []
    assembled: list[str] = []
    for block in system.split("\n\n"):
        if block.startswith(MEMORIES_TITLE):
            memories.append(block)
        elif block.startswith((PENDING_TITLE, TOOLS_TITLE)) or assembled:
            assembled.append(block)
        else:
            prompt.append(block)
    memory_text = "\n\n".join(memories)
    count = sum(1 for line in memory_text.splitlines() if line.startswith("- "))
    return "\n\n".join(prompt), memory_text, "\n\n".join(assembled), count


def _history_text(messages: Sequence[JsonObject]) -> str:
    lines = []
    for m in messages:
        text = _content(m)
        calls = m.get("tool_calls")
        if calls:
            text = f"{text}\n{json.dumps(calls)}".strip()
        lines.append(f"{m.get('role')}: {text}")
    return "\n".join(lines)


def _section(name: SectionName, text: str, items: int, overhead: int = 0) -> ContextSection:
    return ContextSection(
        name=name,
        label=LABELS[name],
        tokens=estimate_tokens(text) + overhead,
        chars=len(text),
        items=items,
        text=text,
    )


def context_window(
    call_id: str,
    provider: str,
    model: str,
    request: JsonObject,
    reported_prompt_tokens: int | None,
    window: int | None,
) -> ContextWindow:
    """The parts of ``request`` (an OpenAI chat-completions body) with their token estimates."""
    raw: Any = request.get("messages")
    messages = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
    systems = [m for m in messages if m.get("role") == "system"]
    others = [m for m in messages if m.get("role") != "system"]
    prompt, memories, assembled, memory_count = split_system(
        "\n\n".join(_content(m) for m in systems)
    )
    tools: Any = request.get("tools")
    tool_list = tools if isinstance(tools, list) else []
    sections = [
        _section("system_prompt", prompt, len(systems), MESSAGE_OVERHEAD_TOKENS * len(systems)),
        _section("memories", memories, memory_count),
        _section("assembled_context", assembled, 1 if assembled else 0),
        _section(
            "history", _history_text(others), len(others), MESSAGE_OVERHEAD_TOKENS * len(others)
        ),
        _section("tool_specs", json.dumps(tool_list) if tool_list else "", len(tool_list)),
    ]
    max_tokens = request.get("max_tokens")
    return ContextWindow(
        call_id=call_id,
        provider=provider,
        model=model,
        counted_by=ESTIMATE,
        sections=sections,
        total_tokens=sum(s.tokens for s in sections),
        reported_prompt_tokens=reported_prompt_tokens,
        window=window,
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
    )

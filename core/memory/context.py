"""Context assembly's text: memories, pending work and tools rendered into ``system_context``.

Pure: the default ``context_assembly`` task searches memories, then calls ``assemble_context`` with
what it found and what the Conversation passed in. Recent turns are not repeated here: the
Conversation sends them as chat messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_MEMORY_CHARS = 600
MAX_CONTEXT_CHARS = 6000
MEMORIES_TITLE = "What you remember (most relevant and important first):"
PENDING_TITLE = "Work still in progress from earlier in this conversation:"
TOOLS_TITLE = "Tools you can call:"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def memory_lines(memories: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per memory, in the order given (already ranked)."""
    lines = []
    for memory in memories:
        content = str(memory.get("content") or "")
        if not content:
            continue
        kind = str(memory.get("type") or "memory")
        lines.append(f"- [{kind}] {_clip(content, MAX_MEMORY_CHARS)}")
    return lines


def pending_lines(pending: Sequence[Any]) -> list[str]:
    lines = []
    for item in pending:
        if isinstance(item, Mapping):
            name = item.get("tool") or item.get("name") or item.get("kind") or "operation"
            status = item.get("status") or "in progress"
            since = f" since {item['started_at']}" if item.get("started_at") else ""
            lines.append(f"- {name}: {status}{since}")
        else:
            lines.append(f"- {_clip(str(item), 200)}")
    return lines


def tool_lines(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    return [
        f"- {tool.get('name')}: {_clip(str(tool.get('description') or ''), 200)}"
        for tool in tools
        if tool.get("name")
    ]


def assemble_context(
    memories: Sequence[Mapping[str, Any]],
    pending: Sequence[Any] = (),
    tools: Sequence[Mapping[str, Any]] = (),
    max_chars: int = MAX_CONTEXT_CHARS,
) -> str:
    """The text appended to the system prompt; empty sections are left out."""
    sections: list[str] = []
    for title, lines in (
        (MEMORIES_TITLE, memory_lines(memories)),
        (PENDING_TITLE, pending_lines(pending)),
        (TOOLS_TITLE, tool_lines(tools)),
    ):
        if lines:
            sections.append("\n".join([title, *lines]))
    text = "\n\n".join(sections)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"

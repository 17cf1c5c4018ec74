"""What a model call's context window held: a recorded request split into its parts (system
prompt, memories, other assembled context, history, tool specs), each with a token count.

Pure. Two ways to count:

* ``TOKENIZER``: the served model's own chat template and tokenizer counted the request. The shell
  sends the bodies ``prompt_probes`` makes to the local deployment, which answers with the prompt
  tokens of each as it would render it (``PromptCounts``); the sections are then the differences
  between growing prefixes of the request (each system message cut at its parts' boundaries, then
  whole messages), so they add up to the whole request's count exactly: the count the engine
  reported for the call. The chat template's own tokens (role markers, separators) count with the
  message they frame, the generation prompt with the history, and the tool specs are what adding
  the tools to the request adds (nothing, for a template that does not render them).
* ``ESTIMATE``: about four characters a token (the usual rule for BPE tokenizers on English text),
  when no tokenizer answered: another provider's model, or the deployment did not.

The call's recorded ``prompt_tokens`` is reported beside either, and the window is the served
model's context length where the deployment states one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from core.domain import Model
from core.jsontypes import JsonObject
from core.memory.context import MEMORIES_TITLE, PENDING_TITLE, TOOLS_TITLE

SectionName = Literal["system_prompt", "memories", "assembled_context", "history", "tool_specs"]
CountMethod = Literal["estimate", "tokenizer"]

ESTIMATE: CountMethod = "estimate"
TOKENIZER: CountMethod = "tokenizer"
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
    tokens: int = Field(description="Its tokens, counted or estimated (see counted_by)")
    chars: int
    items: int = Field(description="Messages, memories or tools in the section")
    text: str = Field(description="What the section holds, as sent (tool specs as JSON)")


class ContextWindow(Model):
    """``GET .../calls/{call_id}/context``."""

    call_id: str
    provider: str
    model: str
    counted_by: CountMethod = Field(
        description="tokenizer: the served model's chat template and tokenizer counted the "
        "request; estimate: about four characters a token (no tokenizer answered: see count_note)"
    )
    tokenizer: str | None = Field(
        None, description="The model whose tokenizer counted (counted_by tokenizer)"
    )
    count_note: str | None = Field(
        None, description="Why the counts are estimated (counted_by estimate)"
    )
    sections: list[ContextSection]
    total_tokens: int = Field(
        description="The sections summed: with a tokenizer, the whole request's prompt tokens"
    )
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


class PromptCounts(Model):
    """The local deployment's answer to ``prompt_probes``: each body's prompt tokens, in order."""

    tokenizer: str = Field(description="The served model whose chat template and tokenizer counted")
    counts: list[int]
    max_model_len: int | None = Field(None, description="The engine's context length")


@dataclass(frozen=True, slots=True)
class Cut:
    """A prefix of the request's messages: the first ``messages`` whole, then, when ``chars`` is
    set, the next one's content up to that many characters. The tokens it adds to the previous
    cut belong to ``section``."""

    messages: int
    chars: int | None
    section: SectionName


def _messages(request: JsonObject) -> list[JsonObject]:
    raw: Any = request.get("messages")
    return [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []


def _tools(request: JsonObject) -> list[Any]:
    tools: Any = request.get("tools")
    return tools if isinstance(tools, list) else []


def _block_section(block: str, assembled_started: bool) -> SectionName:
    """``split_system``'s rule for one block of a system message."""
    if block.startswith(MEMORIES_TITLE):
        return "memories"
    if assembled_started or block.startswith((PENDING_TITLE, TOOLS_TITLE)):
        return "assembled_context"
    return "system_prompt"


def _system_cuts(index: int, message: JsonObject, assembled: bool) -> tuple[list[Cut], bool]:
    """One system message's cuts: at the end of each run of blocks of one section (the last run
    ends with the message), with the rule's state carried across system messages."""
    content = message.get("content")
    blocks = content.split("\n\n") if isinstance(content, str) else [_content(message)]
    cuts: list[Cut] = []
    end = 0
    for n, block in enumerate(blocks):
        section = _block_section(block, assembled)
        assembled = assembled or section == "assembled_context"
        end += len(block) + (2 if n else 0)
        if cuts and cuts[-1].section == section:
            cuts.pop()
        cuts.append(Cut(index, end, section))
    last = cuts.pop()
    return [*cuts, Cut(index + 1, None, last.section)], assembled


def prompt_cuts(request: JsonObject) -> list[Cut]:
    """The growing prefixes whose counts split ``request`` into its sections (consecutive cuts of
    one section merged: only the last is counted); the last is the whole message list."""
    cuts: list[Cut] = []
    assembled = False
    for index, message in enumerate(_messages(request)):
        if message.get("role") == "system":
            added, assembled = _system_cuts(index, message, assembled)
        else:
            added = [Cut(index + 1, None, "history")]
        for cut in added:
            if cuts and cuts[-1].section == cut.section:
                cuts.pop()
            cuts.append(cut)
    return cuts


def _without_tools(request: JsonObject) -> JsonObject:
    return {
        k: v for k, v in request.items() if k not in ("tools", "tool_choice", "parallel_tool_calls")
    }


def _cut_body(request: JsonObject, cut: Cut) -> JsonObject:
    messages = _messages(request)
    kept = messages[: cut.messages]
    if cut.chars is not None:
        partial = messages[cut.messages]
        kept.append({**partial, "content": str(partial.get("content") or "")[: cut.chars]})
    body = _without_tools(request)
    body.update(messages=kept, add_generation_prompt=False, continue_final_message=False)
    return body


def prompt_probes(request: JsonObject) -> list[JsonObject]:
    """The chat bodies whose prompt tokens the model's tokenizer is asked for: the request as sent
    (its total), without its tools when it has some, then each of ``prompt_cuts`` without tools
    or the generation prompt. Empty when the request has no messages."""
    if not _messages(request):
        return []
    head = [request, _without_tools(request)] if _tools(request) else [request]
    return [*head, *(_cut_body(request, cut) for cut in prompt_cuts(request))]


def exact_tokens(request: JsonObject, counts: Sequence[int]) -> dict[SectionName, int]:
    """Each section's tokens from the counts of ``prompt_probes(request)``, summing to the first
    (the whole request). ``ValueError`` when the counts do not answer those probes."""
    cuts = prompt_cuts(request)
    with_tools = bool(_tools(request))
    head = 2 if with_tools else 1
    if not cuts or len(counts) != head + len(cuts):
        raise ValueError(f"{len(counts)} counts for {head + len(cuts)} prompts")
    tokens: dict[SectionName, int] = dict.fromkeys(LABELS, 0)
    tokens["tool_specs"] = counts[0] - counts[1] if with_tools else 0
    previous = 0
    for cut, count in zip(cuts, counts[head:], strict=True):
        tokens[cut.section] += count - previous
        previous = count
    tokens["history"] += counts[head - 1] - previous  # the generation prompt: the answer's start
    return tokens


def _section(name: SectionName, text: str, items: int, tokens: int) -> ContextSection:
    return ContextSection(
        name=name, label=LABELS[name], tokens=tokens, chars=len(text), items=items, text=text
    )


def context_window(
    call_id: str,
    provider: str,
    model: str,
    request: JsonObject,
    reported_prompt_tokens: int | None,
    window: int | None,
    counted: PromptCounts | None = None,
    count_note: str | None = None,
) -> ContextWindow:
    """The parts of ``request`` (an OpenAI chat-completions body) with their tokens: exact from
    ``counted`` (the tokenizer's answer to ``prompt_probes(request)``), else estimated, with
    ``count_note`` saying why. Counts that do not fit the probes are estimated, and said so.
    ``window`` None: the engine's context length, where the tokenizer's answer states it."""
    messages = _messages(request)
    systems = [m for m in messages if m.get("role") == "system"]
    others = [m for m in messages if m.get("role") != "system"]
    prompt, memories, assembled, memory_count = split_system(
        "\n\n".join(_content(m) for m in systems)
    )
    tool_list = _tools(request)
    tool_text = json.dumps(tool_list) if tool_list else ""
    history = _history_text(others)
    parts: list[tuple[SectionName, str, int, int]] = [
        ("system_prompt", prompt, len(systems), MESSAGE_OVERHEAD_TOKENS * len(systems)),
        ("memories", memories, memory_count, 0),
        ("assembled_context", assembled, 1 if assembled else 0, 0),
        ("history", history, len(others), MESSAGE_OVERHEAD_TOKENS * len(others)),
        ("tool_specs", tool_text, len(tool_list), 0),
    ]
    exact: dict[SectionName, int] | None = None
    if counted is not None:
        try:
            exact = exact_tokens(request, counted.counts)
        except ValueError as exc:
            count_note = f"the tokenizer's answer did not fit the request ({exc})"
    sections = [
        _section(name, text, items, exact[name] if exact else estimate_tokens(text) + overhead)
        for name, text, items, overhead in parts
    ]
    max_tokens = request.get("max_tokens")
    return ContextWindow(
        call_id=call_id,
        provider=provider,
        model=model,
        counted_by=TOKENIZER if exact else ESTIMATE,
        tokenizer=counted.tokenizer if exact and counted else None,
        count_note=None if exact else count_note,
        sections=sections,
        total_tokens=sum(s.tokens for s in sections),
        reported_prompt_tokens=reported_prompt_tokens,
        window=window if window is not None or counted is None else counted.max_model_len,
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
    )

"""Tool calling for models that cannot do it natively: the ``constrained`` mode of a model profile.

SmolLM2-135M's chat template drops ``tools`` and the model never emits a tool call by itself
(``tool_choice="auto"`` only ever gives text). What it can do reliably is fill a grammar. So a turn
that offers tools takes two constrained calls instead of one free one:

1. **Choose.** The tools are described in the system prompt (in text, since the template ignores
   ``tools``) and a structured-output call must answer ``{"action": <one of "reply" or the tool
   names>}``: an enum, so the answer is always one of the allowed names.
2. **Fill.** If a tool was chosen, a second call names it in ``tool_choice`` with ``"strict": true``
   and a schema whose every generated field is bounded (``maxLength``, ``enum``, integer
   ``minimum``/``maximum``, ``maxItems``, no additional properties) — unbounded fields make a small
   model loop until ``max_tokens``. The grammar guarantees schema-valid JSON arguments.
   If ``reply`` was chosen, the reply is streamed as plain text without any tool in the request.

History is rendered for templates that only know ``system``/``user``/``assistant`` and string
content: earlier tool calls become assistant text and tool results become user-side text.

``native`` mode sends the tools as they are with ``tool_choice="auto"`` (capable hosted models).
Everything here except ``stream_chat`` is pure request building and parsing; ``stream_chat`` runs
the protocol over any ``CompletionBackend`` (the HTTP client or the Serve handle client).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Protocol

from core.jsontypes import JsonObject
from core.llm.protocol import (
    ChatChunk,
    ChatRequest,
    ModelFinished,
    TextDelta,
    ToolCallRequested,
    ToolSpec,
)
from core.llm.recording import recorded_body
from core.model_calls import CallPurpose
from core.tool_shortcuts import shortcut_arguments

REPLY = "reply"
"""The chooser's answer for "no tool: answer the user"."""
CHOOSER_MAX_TOKENS = 48
ARGUMENTS_MAX_TOKENS = 512
STRING_MAX_LENGTH = 200
INTEGER_BOUND = 1_000_000
ARRAY_MAX_ITEMS = 16


class CompletionBackend(Protocol):
    """Streams one raw chat-completions body (OpenAI shape) as chunks.

    A backend may also say its ``provider`` name (records and spans: ``vllm``, ``openai``) and
    what the model receives of a body (``sent_body(body)``: what ``stream_body`` makes of it on
    the way); without them the body is recorded as given."""

    def stream_body(self, body: JsonObject, timeout_s: float) -> AsyncIterator[ChatChunk]: ...


# --------------------------------------------------------------------------- the protocol


def stream_chat(backend: CompletionBackend, request: ChatRequest) -> AsyncIterator[ChatChunk]:
    """Stream ``request`` through ``backend`` in the request's tool-calling mode; every body
    sent is recorded (``core.llm.recording``)."""
    if request.tool_calling == "native":
        return _sent(backend, native_body(request), request.timeout_s, "answer")
    if not request.tools:
        return _sent(backend, reply_body(request), request.timeout_s, "answer")
    return _choose_then_act(backend, request)


def _sent(
    backend: CompletionBackend, body: JsonObject, timeout_s: float, purpose: CallPurpose
) -> AsyncIterator[ChatChunk]:
    """One body through the backend, recorded as the model receives it."""
    sent_body = getattr(backend, "sent_body", None)
    provider = str(getattr(backend, "provider", "") or "unknown")
    sent = sent_body(body) if sent_body is not None else body
    return recorded_body(backend.stream_body, body, timeout_s, purpose, provider, sent)


async def _choose_then_act(
    backend: CompletionBackend, request: ChatRequest
) -> AsyncIterator[ChatChunk]:
    shortcut = shortcut_call(request)
    if shortcut is not None:  # a tool's pattern chose: no model call for the choice or the fill
        yield shortcut
        yield ModelFinished(finish_reason="tool_calls")
        return
    text, chosen_usage = await _collect_text(
        _sent(backend, chooser_body(request), request.timeout_s, "choose")
    )
    choice = parse_choice(text, [tool.name for tool in request.tools])
    if choice == REPLY:
        async for chunk in _sent(backend, reply_body(request), request.timeout_s, "reply"):
            yield add_usage(chunk, chosen_usage) if isinstance(chunk, ModelFinished) else chunk
        return
    tool = next(t for t in request.tools if t.name == choice)
    calls: list[ToolCallRequested] = []
    text_parts: list[str] = []
    finished = ModelFinished()
    async for chunk in _sent(backend, arguments_body(request, tool), request.timeout_s, "fill"):
        if isinstance(chunk, ToolCallRequested):
            calls.append(chunk)
        elif isinstance(chunk, TextDelta):
            text_parts.append(chunk.text)
        else:
            finished = chunk
    yield first_call_for(tool.name, calls, "".join(text_parts))
    yield ModelFinished(
        prompt_tokens=finished.prompt_tokens + chosen_usage.prompt_tokens,
        completion_tokens=finished.completion_tokens + chosen_usage.completion_tokens,
        finish_reason="tool_calls",
    )


async def _collect_text(chunks: AsyncIterator[ChatChunk]) -> tuple[str, ModelFinished]:
    parts: list[str] = []
    finished = ModelFinished()
    async for chunk in chunks:
        if isinstance(chunk, TextDelta):
            parts.append(chunk.text)
        elif isinstance(chunk, ModelFinished):
            finished = chunk
    return "".join(parts), finished


def add_usage(finished: ModelFinished, earlier: ModelFinished) -> ModelFinished:
    return ModelFinished(
        prompt_tokens=finished.prompt_tokens + earlier.prompt_tokens,
        completion_tokens=finished.completion_tokens + earlier.completion_tokens,
        finish_reason=finished.finish_reason,
    )


def first_call_for(name: str, calls: Sequence[ToolCallRequested], text: str) -> ToolCallRequested:
    """The call the fill step produced (the first with the chosen name); if the server answered
    in text instead, that text is taken as the arguments and the loop's validation judges it."""
    for call in calls:
        if call.name == name or not call.name:
            return ToolCallRequested(id=call.id or "call_0", name=name, arguments=call.arguments)
    return ToolCallRequested(id="call_0", name=name, arguments=text.strip())


def shortcut_call(request: ChatRequest) -> ToolCallRequested | None:
    """The call a tool's shortcut makes for the user's latest message, if one matches
    (``core.tool_shortcuts``); only when the user spoke last, so a tool's result goes back to
    the model."""
    if not request.messages or request.messages[-1].get("role") != "user":
        return None
    text = _text(request.messages[-1].get("content"))
    for tool in request.tools:
        arguments = shortcut_arguments(tool.shortcut, text) if tool.shortcut else None
        if arguments is not None:
            return ToolCallRequested(id="call_shortcut", name=tool.name, arguments=arguments)
    return None


# --------------------------------------------------------------------------- request bodies


def native_body(request: ChatRequest) -> JsonObject:
    """The request as it is, tools offered with ``tool_choice="auto"``."""
    body = _base_body(request, request.messages)
    if request.tools:
        body["tools"] = [tool.to_openai() for tool in request.tools]
        body["tool_choice"] = "auto"
    return body


def reply_body(request: ChatRequest) -> JsonObject:
    """A plain streamed answer, no tools, history rendered as text."""
    return _base_body(request, plain_messages(request.messages))


def chooser_body(request: ChatRequest) -> JsonObject:
    """Step 1: a structured output that must name ``reply`` or one of the tools."""
    names = [tool.name for tool in request.tools]
    schema = {
        "type": "object",
        "properties": {"action": {"type": "string", "enum": [*names, REPLY]}},
        "required": ["action"],
        "additionalProperties": False,
    }
    body = _base_body(request, chooser_messages(request.messages, request.tools))
    body["temperature"] = 0.0  # the decision should not be sampled
    body["max_tokens"] = CHOOSER_MAX_TOKENS + max(len(n) for n in names)
    body["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "next_step", "schema": schema, "strict": True},
    }
    return body


def arguments_body(request: ChatRequest, tool: ToolSpec) -> JsonObject:
    """Step 2: the named tool with ``strict`` bounded arguments."""
    messages = plain_messages(request.messages)
    messages = _with_system_note(
        messages, f"Call the tool {tool.name} ({tool.description.strip()}) with its arguments."
    )
    body = _base_body(request, messages)
    body["max_tokens"] = min(request.max_tokens, ARGUMENTS_MAX_TOKENS)
    body["tools"] = [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": bounded_schema(tool.parameters),
                "strict": True,
            },
        }
    ]
    body["tool_choice"] = {"type": "function", "function": {"name": tool.name}}
    return body


def _base_body(request: ChatRequest, messages: list[JsonObject]) -> JsonObject:
    body: JsonObject = {
        "model": request.model,
        "messages": messages,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.cache_key:
        body["prompt_cache_key"] = request.cache_key
    body.update(request.reasoning)
    return body


# --------------------------------------------------------------------------- prompts


def chooser_messages(messages: Sequence[JsonObject], tools: Sequence[ToolSpec]) -> list[JsonObject]:
    """The history with the tools described in the system prompt and the decision asked for."""
    lines = ["You can use these tools:"]
    lines += [f"- {tool.name}: {describe_tool(tool)}" for tool in tools]
    lines.append(
        f"Decide the next step. If a tool is needed to answer the user's last message, answer "
        f"with that tool's name as the action. If you can answer directly, or a tool result "
        f'above already answers it, the action is "{REPLY}".'
    )
    return _with_system_note(plain_messages(messages), "\n".join(lines))


def describe_tool(tool: ToolSpec) -> str:
    """One line: the description and the argument names with their types."""
    properties = tool.parameters.get("properties") or {}
    args = ", ".join(f"{name} ({_type_name(spec)})" for name, spec in properties.items())
    description = " ".join(tool.description.split())
    return f"{description} Arguments: {args}." if args else description


def _type_name(spec: Any) -> str:
    if not isinstance(spec, dict):
        return "any"
    if "enum" in spec:
        return " | ".join(json.dumps(v) for v in spec["enum"][:8])
    kind = spec.get("type", "any")
    return "/".join(kind) if isinstance(kind, list) else str(kind)


def plain_messages(messages: Iterable[JsonObject]) -> list[JsonObject]:
    """Messages a plain chat template can render: string content, no tool roles or tool calls."""
    names: dict[str, str] = {}
    out: list[JsonObject] = []
    for message in messages:
        role = message.get("role")
        content = _text(message.get("content"))
        if role == "tool":
            name = message.get("name") or names.get(str(message.get("tool_call_id")), "a tool")
            out.append({"role": "user", "content": f"[Result of {name}]\n{content}"})
            continue
        if role == "assistant" and message.get("tool_calls"):
            rendered = []
            for call in message["tool_calls"]:
                fn = call.get("function") or {}
                names[str(call.get("id"))] = str(fn.get("name"))
                rendered.append(f"[Called {fn.get('name')} with {fn.get('arguments') or '{}'}]")
            content = "\n".join(filter(None, [content, *rendered]))
        if role not in ("system", "user", "assistant"):
            role = "user"
        out.append({"role": role, "content": content})
    return out


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return json.dumps(content)


def _with_system_note(messages: list[JsonObject], note: str) -> list[JsonObject]:
    """``note`` appended to the leading system message (one is added if there is none)."""
    if messages and messages[0]["role"] == "system":
        first = {"role": "system", "content": f"{messages[0]['content']}\n\n{note}".strip()}
        return [first, *messages[1:]]
    return [{"role": "system", "content": note}, *messages]


# --------------------------------------------------------------------------- parsing


def parse_choice(text: str, tool_names: Sequence[str]) -> str:
    """The chooser's action: a tool name or ``REPLY`` (also for anything unparseable)."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        value = text.strip().strip('"')
    if isinstance(value, dict):
        value = value.get("action")
    return value if isinstance(value, str) and value in tool_names else REPLY


# --------------------------------------------------------------------------- schemas


def bounded_schema(schema: JsonObject) -> JsonObject:
    """A copy of ``schema`` where every generated value has an upper bound on its length.

    Strings get ``maxLength``, integers and numbers ``minimum``/``maximum``, arrays ``maxItems``,
    objects ``additionalProperties: false``; bounds already present are kept.
    """
    out: JsonObject = {k: v for k, v in schema.items()}
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(out.get(key), list):
            out[key] = [bounded_schema(s) if isinstance(s, dict) else s for s in out[key]]
    if "enum" in out or "const" in out:
        return out
    kinds = out.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if "object" in kinds or "properties" in out:
        out["properties"] = {
            name: bounded_schema(s) if isinstance(s, dict) else s
            for name, s in (out.get("properties") or {}).items()
        }
        out.setdefault("additionalProperties", False)
    if "array" in kinds:
        if isinstance(out.get("items"), dict):
            out["items"] = bounded_schema(out["items"])
        out.setdefault("maxItems", ARRAY_MAX_ITEMS)
    if "string" in kinds:
        out.setdefault("maxLength", STRING_MAX_LENGTH)
    if kinds & {"integer", "number"}:
        out.setdefault("minimum", -INTEGER_BOUND)
        out.setdefault("maximum", INTEGER_BOUND)
    return out

"""``llm``: one model call from a task, optionally returning JSON validated against a schema.

Params: ``model_profile`` (a library id; default: the task's agent's persona profile, else
``local``), ``system``, ``prompt``, ``transcript`` (``[{role, content}]``, rendered as text into the
prompt), or ``messages`` (a full chat), ``max_tokens``, ``temperature``, and ``json_schema``: when
given, the reply must be a JSON object valid against it (the model is told so; the first ``{...}``
in the reply is parsed). Keep generated fields bounded (``maxLength``, ``maxItems``, ``maximum``):
small local models loop on unbounded ones.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from actors.actions import ActionContext, JsonObject, action
from core.domain import ModelProfile, resolved_tool_calling
from core.errors import InvalidInput, NonRetryableError, NotFound
from core.json_schemas import errors as schema_errors
from core.llm import recording
from core.llm.protocol import ChatRequest, complete
from core.llm.recording import CallScope

DEFAULT_PROFILE = "local"
MAX_TRANSCRIPT_CHARS = 12_000


class ModelOutputInvalid(NonRetryableError):
    """The model's reply was not the JSON the task asked for."""


def resolve_profile(params: JsonObject, ctx: ActionContext) -> ModelProfile:
    """The profile named in params, else the agent's persona's, else ``local``."""
    store = ctx.services.store
    inline = params.get("profile")
    if isinstance(inline, dict):
        return ModelProfile.model_validate(inline)
    profile_id = params.get("model_profile")
    if not profile_id and ctx.agent_id:
        try:
            agent = store.agents.get(ctx.agent_id)
        except NotFound:
            agent = None
        if agent is not None and agent.persona is not None:
            profile_id = agent.persona.model_profile_id
        elif agent is not None and agent.persona_ref is not None:
            ref = agent.persona_ref
            persona = store.personas.get(
                ref.id, ref.version, client_id=agent.client_id, owner=ref.owner
            )
            profile_id = persona.model_profile_id
    return store.model_profiles.get(str(profile_id or DEFAULT_PROFILE), client_id=ctx.client_id)


def render_transcript(transcript: Any) -> str:
    """``[{role, content}]`` as ``role: content`` lines (the most recent text kept when long);
    a turn transcript's tool calls as ``tool_call name(arguments) -> result``."""
    if not isinstance(transcript, list):
        raise InvalidInput("llm: transcript must be a list of {role, content}")
    lines = [_transcript_line(item) for item in transcript if isinstance(item, dict)]
    text = "\n".join(lines)
    return text[-MAX_TRANSCRIPT_CHARS:]


def _transcript_line(item: JsonObject) -> str:
    if item.get("role") != "tool_call":
        return f"{item.get('role', 'user')}: {item.get('content', '')}"
    arguments = json.dumps(item.get("arguments"), default=str)
    if item.get("success") is False:
        outcome = f"failed: {json.dumps(item.get('error'), default=str)}"
    else:
        outcome = json.dumps(item.get("result"), default=str)
    return f"tool_call {item.get('name')}({arguments}) -> {outcome}"


def build_messages(params: JsonObject) -> list[JsonObject]:
    if isinstance(params.get("messages"), list):
        return list(params["messages"])
    system = str(params.get("system") or "")
    schema = params.get("json_schema")
    if schema:
        system += (
            "\n\nAnswer with one JSON object only, no prose, valid against this JSON Schema:\n"
            + json.dumps(schema, separators=(",", ":"))
        )
    prompt = str(params.get("prompt") or "")
    if params.get("transcript") is not None:
        prompt = (prompt + "\n\n" if prompt else "") + render_transcript(params["transcript"])
    if not prompt:
        raise InvalidInput("llm needs a prompt, a transcript or messages")
    messages: list[JsonObject] = []
    if system.strip():
        messages.append({"role": "system", "content": system.strip()})
    messages.append({"role": "user", "content": prompt})
    return messages


def parse_json_reply(text: str, schema: JsonObject) -> JsonObject:
    """The first JSON object in ``text``, validated against ``schema``."""
    start = text.find("{")
    if start < 0:
        raise ModelOutputInvalid(f"the model did not answer with JSON: {text[:200]!r}")
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise ModelOutputInvalid(f"the model's JSON does not parse: {exc}") from exc
    found = schema_errors(schema, value)
    if found:
        raise ModelOutputInvalid(f"the model's JSON is invalid: {found[0].message}")
    if not isinstance(value, dict):
        raise ModelOutputInvalid("the model's JSON is not an object")
    return value


@action("llm")
async def llm(params: JsonObject, data: JsonObject, ctx: ActionContext) -> Any:
    """Call a model profile; returns ``{"text"}`` or, with ``json_schema``, the parsed object."""
    profile = resolve_profile(params, ctx)
    request = ChatRequest(
        messages=build_messages(params),
        model=profile.model,
        temperature=float(params.get("temperature", profile.temperature)),
        max_tokens=int(params.get("max_tokens") or profile.max_tokens),
        timeout_s=profile.timeout_s,
        tool_calling=resolved_tool_calling(profile),
    )
    scope = recording.current_scope() or CallScope()
    model = ctx.services.chat_models.for_profile(profile, ctx.client_id)
    with recording.scoped(replace(scope, profile=profile, purpose="task")):
        text = await complete(model, request)
    schema = params.get("json_schema")
    if schema:
        return await asyncio.to_thread(parse_json_reply, text, schema)
    return {"text": text}

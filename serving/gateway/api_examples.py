"""What the API reference says of each route beyond its summary: a description, an example
request body and an example answer, kept here beside the routes and put into the OpenAPI
document by ``document`` (so ``/docs``, ``/openapi.json`` and ``docs/reference/api.md`` all
show them). ``tests/unit/test_reference_docs.py`` fails when a route has no entry.

Examples are illustrations: ids and times are made up; shapes are the routes' own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

T = "2026-01-06T10:14:02Z"
CLIENT, AGENT, CONV, TURN, MSG = "client_01J9", "agent_01J9", "conv_01J9", "turn_01J9", "msg_01J9"
RUN, PROJECT, KEY, HOOK, TRIGGER = "run_01J9", "proj_01J9", "key_01J9", "hook_01J9", "trig_01J9"

PERSONA = {
    "id": "pirate",
    "version": 1,
    "owner": CLIENT,
    "system_prompt": "You are a pirate. Answer in one short sentence.",
    "model_profile_id": "local",
    "tool_ids": ["calculator"],
}
PROFILE = {"id": "fast", "version": 1, "owner": CLIENT, "provider": "vllm", "model": "default"}
TOOL = {
    "id": "word_count",
    "version": 1,
    "owner": CLIENT,
    "name": "word_count",
    "description": "Count the words of a text exactly.",
    "target_type": "task",
    "target_id": "word_count",
    "input_schema": {
        "type": "object",
        "required": ["text"],
        "properties": {"text": {"type": "string"}},
    },
}
TASK = {
    "id": "word_count",
    "version": 1,
    "owner": CLIENT,
    "description": "Count the words of a text.",
    "actions": [{"kind": "python", "params": {"callable": "wordtools:count_words"}}],
}
WORKFLOW = {
    "id": "floor_price",
    "version": 1,
    "owner": CLIENT,
    "nodes": [
        {
            "id": "area",
            "kind": "task",
            "target_id": "calculator",
            "input_mapping": {"expression": "{{input.width}} * {{input.length}}"},
        }
    ],
    "edges": [],
}
LIBRARY = {
    "personas": PERSONA,
    "model-profiles": PROFILE,
    "tools": TOOL,
    "tasks": TASK,
    "workflows": WORKFLOW,
}
AGENT_OUT = {
    "id": AGENT,
    "client_id": CLIENT,
    "name": "Captain",
    "persona_ref": {"id": "pirate", "version": None, "owner": None},
    "project_ids": [],
    "created_at": T,
}
CONVERSATION = {
    "id": CONV,
    "client_id": CLIENT,
    "agent_id": AGENT,
    "participants": [{"type": "agent", "id": AGENT}],
    "status": "active",
    "title": "Plans",
    "depth": 0,
    "concurrency_policy": "parallel",
    "created_at": T,
}
MESSAGE = {
    "id": MSG,
    "conversation_id": CONV,
    "turn_id": TURN,
    "role": "user",
    "author": CLIENT,
    "content": "What is 12*7?",
    "seq": 2,
    "source": "human",
    "created_at": T,
    "inherited_from": None,
}
TURN_OUT = {
    "id": TURN,
    "conversation_id": CONV,
    "agent_id": AGENT,
    "parent_turn_id": None,
    "caller": "user",
    "input": "What is 12*7?",
    "status": "completed",
    "usage": {"prompt_tokens": 212, "completion_tokens": 9},
    "created_at": T,
    "completed_at": T,
}
MOVE = {
    "index": 0,
    "tool_call": {"id": "call_1", "name": "calculator", "input": {"expression": "12*7"}},
    "tool_result": {"success": True, "result": {"expression": "12*7", "result": 84}},
}
BUNDLE: dict[str, Any] = {
    "format": "wonder.conversation/1",
    "exported_at": T,
    "conversation": CONVERSATION,
    "turns": [
        {
            "id": TURN,
            "conversation_id": CONV,
            "agent_id": AGENT,
            "caller": {"type": "user", "user_id": "ana"},
            "user_id": "ana",
            "input": "What is 12*7?",
            "status": "completed",
            "usage": {"prompt_tokens": 31, "completion_tokens": 2},
            "created_at": T,
            "completed_at": T,
        }
    ],
    "messages": [
        {**{k: v for k, v in MESSAGE.items() if k != "inherited_from"}, "seq": 3},
        {
            "id": "msg_01JB",
            "conversation_id": CONV,
            "turn_id": TURN,
            "role": "agent",
            "author": AGENT,
            "content": "84",
            "seq": 4,
            "source": "agent",
            "created_at": T,
        },
    ],
    "moves": [],
    "model_calls": [
        {
            "id": "call_01J9ZB4M6D2S8E3Q1T7V5W9X0Y",
            "source": {"conversation_id": CONV, "turn_id": TURN, "step": 1},
            "purpose": "answer",
            "provider": "vllm",
            "model": "default",
            "request": {"model": "default", "messages": [{"role": "user", "content": "12*7?"}]},
            "response": {"content": "84", "tool_calls": [], "finish_reason": "stop"},
            "usage": {"prompt_tokens": 31, "completion_tokens": 2},
            "timings": {"started_at": T, "duration_s": 0.41},
            "created_at": T,
        }
    ],
}
RUN_OUT: dict[str, Any] = {
    "run": {
        "id": RUN,
        "workflow_id": "floor_price",
        "workflow_version": 1,
        "status": "completed",
        "input": {"width": 3, "length": 4.5},
        "output": {"area_m2": 13.5},
        "error": None,
        "created_at": T,
        "finished_at": T,
        "events": [],
    },
    "nodes": [
        {
            "run_id": RUN,
            "token_id": "tok_1",
            "seq": 1,
            "node_id": "area",
            "kind": "task",
            "state": "done",
            "input": {"expression": "3 * 4.5"},
            "output": {"expression": "3 * 4.5", "result": 13.5},
        }
    ],
}
MEMORY = {
    "id": "mem_01J9",
    "agent_id": AGENT,
    "type": "fact",
    "content": "The user lives in Lyon.",
    "significance": 0.7,
    "subject": "user.city",
    "metadata": "{}",
    "created_at": T,
    "updated_at": T,
}
PROJECT_OUT = {
    "id": PROJECT,
    "client_id": CLIENT,
    "name": "notes",
    "repository": "/var/wonder/projects/proj_01J9",
    "origin": None,
    "managed": True,
    "default_branch": "main",
    "push_on_merge": False,
    "artifacts_repository": "/var/wonder/projects/proj_01J9-artifacts",
    "created_at": T,
    "status": "ready",
}
BRANCH = {
    "project_id": PROJECT,
    "branch": f"wonder/conv-{CONV}",
    "default_branch": "main",
    "head": "9c1e2f0",
    "ahead": 1,
    "behind": 0,
    "commits": [{"commit": "9c1e2f0", "subject": "Start the notes"}],
}
DIFF = {
    "base": "3f2a7d1",
    "branch": f"wonder/conv-{CONV}",
    "files": ["NOTES.md"],
    "diff": "diff --git a/NOTES.md b/NOTES.md\n+# Notes\n",
    "truncated": False,
}
MERGED = {
    "status": "merged",
    "commit": "b41d9e2",
    "default_branch": "main",
    "pushed": False,
    "push_error": None,
}
QUOTA = {"requests_per_second": 20, "burst": 40, "concurrent_turns": 8, "tokens_per_day": 2000000}
USER_QUOTA = {"requests_per_second": 2, "burst": 5, "concurrent_turns": 1}
KEY_OUT = {
    "id": KEY,
    "client_id": CLIENT,
    "name": "mobile app",
    "scope": "app",
    "status": "active",
    "created_at": T,
    "expires_at": "2026-12-31T23:59:59Z",
    "revoked_at": None,
}
SECRET = {
    "name": "openai-key",
    "version": 1,
    "created_at": T,
    "created_by": f"client:{CLIENT}",
    "rotated_at": None,
    "rotated_by": None,
    "size": 51,
}
MEMBER = {
    "conversation_id": CONV,
    "user_id": "ann",
    "level": "writer",
    "granted_at": T,
    "granted_by": "owner-user",
}
HOOK_OUT = {
    "id": HOOK,
    "route": {"kind": "session", "target": "inbox"},
    "title": "Inbox",
    "created_at": T,
}
TRIGGER_OUT = {
    "id": TRIGGER,
    "client_id": CLIENT,
    "schedule": "0 8 * * 1-5",
    "template": "Good morning: what is on today?",
    "route": {"kind": "session", "target": "daily"},
    "next_due": T,
    "created_at": T,
}
DELIVERED = {"conversation_id": CONV, "turn_id": TURN, "message_id": MSG, "seq": 2}


UPKEEP_POLICY = {
    "schedule": "17 3 * * *",
    "consolidation": {"after_hours": 24, "group_size": 20},
    "retention": {"archived_days": 90},
}
UPKEEP = {
    "agent_id": AGENT,
    "source": "agent",
    "policy": UPKEEP_POLICY,
    "agent_policy": UPKEEP_POLICY,
    "next_due": T,
    "runs": 0,
    "last_run": None,
}


CREATED = 1767694442  # T as Unix seconds, as a chat completion's `created` is
ANSWER = "84, matey."
COMPLETION = {
    "id": f"chatcmpl-{TURN}",
    "object": "chat.completion",
    "created": CREATED,
    "model": f"agent:{AGENT}",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 212, "completion_tokens": 9, "total_tokens": 221},
    "conversation_id": CONV,
}
MCP_TOOL_IDS = ["mcp.github.create_issue", "mcp.github.search_issues"]
MCP_SERVER = {
    "id": "github",
    "client_id": CLIENT,
    "transport": "http",
    "url": "https://mcp.example.com/mcp",
    "command": None,
    "headers": {},
    "secret_headers": {"Authorization": {"secret": "github-token", "prefix": "Bearer "}},
    "tool_prefix": "gh_",
    "timeout_s": 60.0,
    "tool_ids": MCP_TOOL_IDS,
    "listed_at": T,
    "created_at": T,
    "updated_at": T,
}
A2A_URL = f"https://wonder.example.com/a2a/agents/{AGENT}"
A2A_CARD = {
    "name": "Captain",
    "description": "The Wonder agent 'Captain' (pirate): each message is one turn of the agent, "
    "with its tools and memory; a task's contextId is its conversation.",
    "supportedInterfaces": [
        {"url": A2A_URL, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ],
    "version": "0.1.0",
    "capabilities": {"streaming": True, "pushNotifications": False, "extendedAgentCard": False},
    "securitySchemes": {
        "wonderApiKey": {
            "httpAuthSecurityScheme": {
                "description": "A Wonder API key (X-Wonder-User: acting user)",
                "scheme": "Bearer",
            }
        }
    },
    "securityRequirements": [{"schemes": {"wonderApiKey": {}}}],
    "defaultInputModes": ["text/plain", "application/json"],
    "defaultOutputModes": ["text/plain"],
    "skills": [
        {
            "id": AGENT,
            "name": "Captain",
            "description": "Send a message to Captain; the answer is its reply.",
            "tags": ["wonder", "agent"],
        }
    ],
}


def _a2a_message(message_id: str, role: str, text: str) -> dict[str, Any]:
    return {
        "messageId": message_id,
        "contextId": CONV,
        "taskId": TURN,
        "role": role,
        "parts": [{"text": text, "mediaType": "text/plain"}],
    }


A2A_TASK = {
    "id": TURN,
    "contextId": CONV,
    "status": {"state": "TASK_STATE_COMPLETED", "timestamp": T},
    "artifacts": [
        {
            "artifactId": "answer",
            "name": "answer",
            "description": "The agent's messages of the turn",
            "parts": [{"text": ANSWER, "mediaType": "text/plain"}],
        }
    ],
    "history": [
        _a2a_message(MSG, "ROLE_USER", "What is 12*7?"),
        _a2a_message("msg_01K2", "ROLE_AGENT", ANSWER),
    ],
}


@dataclass(frozen=True)
class RouteDoc:
    """A route's description and examples (``request`` None: the route takes no body)."""

    description: str
    response: Any
    request: Any = None


def _library(kind: str) -> dict[tuple[str, str], RouteDoc]:
    obj = LIBRARY[kind]
    body = {k: v for k, v in obj.items() if k not in ("id", "version", "owner")}
    path = f"/v1/{kind}/{{obj_id}}"
    return {
        ("PUT", path): RouteDoc(
            "Stores the body as the next version under the path's id (an unchanged body returns "
            "the current version). Ids the system library holds are read-only (403); the body "
            "is validated whole (422 naming the field) and its references checked.",
            obj,
            body,
        ),
        ("GET", path): RouteDoc(
            "Your object with that id, else the system library's; `?version=N` for an older "
            "version, `?owner=system` for the system's even when you have your own.",
            obj,
        ),
        ("GET", f"/v1/{kind}"): RouteDoc(
            "The latest version of every object you can use: the system library's and yours "
            "(at most WONDER_LIST_MAX_ITEMS).",
            {"items": [obj]},
        ),
        ("GET", f"{path}/versions"): RouteDoc(
            "Every stored version, oldest first.", {"items": [{**obj, "version": 1}]}
        ),
    }


USAGE_EXAMPLE = {
    "calls": 2,
    "failed_calls": 0,
    "prompt_tokens": 812,
    "completion_tokens": 64,
    "cost": 0.000428,
    "currency": "USD",
}

ROUTES: dict[tuple[str, str], RouteDoc] = {
    ("GET", "/healthz"): RouteDoc(
        "Answers while the gateway runs and its store answers; needs no key.", {"status": "ok"}
    ),
    **{key: doc for kind in LIBRARY for key, doc in _library(kind).items()},
    ("GET", "/v1/library/callables"): RouteDoc(
        "The registered functions a task's `python` action may name: the shipped library's and "
        "the operator's (WONDER_LIBRARY_CALLABLES).",
        {
            "items": [
                {
                    "name": "library.callables:calculate",
                    "description": "Task callable: evaluate an arithmetic expression.",
                    "async": False,
                }
            ]
        },
    ),
    ("POST", "/v1/agents"): RouteDoc(
        "An agent runs a persona (yours, else the system's; pin a version or not) and may be "
        "scoped to projects.",
        AGENT_OUT,
        {"name": "Captain", "persona_ref": {"id": "pirate"}},
    ),
    ("GET", "/v1/agents"): RouteDoc("Your agents, oldest first.", {"items": [AGENT_OUT]}),
    ("GET", "/v1/agents/{agent_id}"): RouteDoc(
        "One of your agents (404: unknown or not yours).", AGENT_OUT
    ),
    ("POST", "/v1/conversations"): RouteDoc(
        "A conversation with an agent (and, with `project_id`, its own branch of the project). "
        "Its first event, `conversation_started`, is seq 1.",
        CONVERSATION,
        {"agent_id": AGENT, "title": "Plans"},
    ),
    ("GET", "/v1/conversations"): RouteDoc(
        "A page of your conversations (`ancestry=roots|children|all`), ordered by creation; pass "
        "`next_cursor` as `after_cursor` for the next page.",
        {"items": [CONVERSATION], "next_cursor": None},
    ),
    ("GET", "/v1/conversations/{conversation_id}"): RouteDoc(
        "One conversation: its agent, participants, status, branch and policy.", CONVERSATION
    ),
    ("DELETE", "/v1/conversations/{conversation_id}"): RouteDoc(
        "Deletes the conversation and every child it started, with their workspaces; refused "
        "(409) while a fork inherits from any of them.",
        {"deleted": [CONV]},
    ),
    ("GET", "/v1/conversations/{conversation_id}/children"): RouteDoc(
        "Conversations this one started by delegating to agents.",
        {"items": [{**CONVERSATION, "id": "conv_01K2", "depth": 1}], "next_cursor": None},
    ),
    ("POST", "/v1/conversations/{conversation_id}/complete"): RouteDoc(
        "Marks the conversation completed: later messages are refused (409).",
        {**CONVERSATION, "status": "completed"},
    ),
    ("POST", "/v1/conversations/{conversation_id}/forks"): RouteDoc(
        "A new conversation whose history is this one's up to and including `turn_id` (which "
        "must have ended: 409 while it runs). Nothing is copied.",
        {
            **CONVERSATION,
            "id": "conv_01K2",
            "forked_from_conversation_id": CONV,
            "forked_at_turn_id": TURN,
        },
        {"turn_id": TURN, "title": "Another way"},
    ),
    ("GET", "/v1/conversations/{conversation_id}/forks"): RouteDoc(
        "The forks made from this conversation.",
        {
            "items": [{**CONVERSATION, "id": "conv_01K2", "forked_from_conversation_id": CONV}],
            "next_cursor": None,
        },
    ),
    ("POST", "/v1/conversations/{conversation_id}/messages"): RouteDoc(
        "Takes the message and starts a turn in the background (202 once it is stored); follow "
        "it on the WebSocket stream or the events. A conversation that rejects messages mid-turn "
        "answers 409.",
        {"turn_id": TURN, "message_id": MSG, "seq": 2},
        {"content": "What is 12*7?"},
    ),
    ("GET", "/v1/conversations/{conversation_id}/messages"): RouteDoc(
        "Messages in order: forward from `after_seq`, or backward from `before_seq` / the end "
        "(`tail=true`); a fork's inherited messages carry `inherited_from`.",
        {"items": [MESSAGE], "older_before_seq": None},
    ),
    ("GET", "/v1/conversations/{conversation_id}/turns"): RouteDoc(
        "The conversation's turns, oldest first: status, input, usage, failure.",
        {"items": [TURN_OUT]},
    ),
    ("GET", "/v1/conversations/{conversation_id}/turns/{turn_id}"): RouteDoc(
        "One turn with its moves: the model's tool calls and their results, in order.",
        {**TURN_OUT, "moves": [MOVE]},
    ),
    ("GET", "/v1/conversations/{conversation_id}/turns/{turn_id}/calls"): RouteDoc(
        "The turn's model calls in order: each request exactly as the model received it (messages, "
        "tools, parameters; never headers or keys) and the response as it came back, with usage, "
        "timings, estimated cost and the span of the call in the turn's trace.",
        {
            "items": [
                {
                    "id": "call_01J9ZB4M6D2S8E3Q1T7V5W9X0Y",
                    "source": {"conversation_id": CONV, "turn_id": TURN, "step": 1},
                    "purpose": "answer",
                    "attempt": 1,
                    "provider": "vllm",
                    "model": "default",
                    "request": {
                        "model": "default",
                        "messages": [
                            {"role": "system", "content": "You are helpful."},
                            {"role": "user", "content": "What is 12*7?"},
                        ],
                    },
                    "request_bytes": 142,
                    "response": {"content": "84", "tool_calls": [], "finish_reason": "stop"},
                    "usage": {"prompt_tokens": 31, "completion_tokens": 2},
                    "status": "ok",
                    "timings": {"started_at": T, "duration_s": 0.41, "first_token_s": 0.12},
                    "created_at": T,
                }
            ]
        },
    ),
    (
        "GET",
        "/v1/conversations/{conversation_id}/turns/{turn_id}/calls/{call_id}/context",
    ): RouteDoc(
        "A recorded call's context window: the system prompt, the memories and other context "
        "assembled into it, the history and the tool specs, each with its tokens, beside the "
        "prompt tokens the model reported and the model's window where the deployment states it. "
        "A call the local model served is counted by its own chat template and tokenizer "
        "(`counted_by: tokenizer`: the parts add up to the request's prompt tokens); any other "
        "call, or one the local deployment cannot count now, is estimated at about four "
        "characters a token (`counted_by: estimate`, `count_note` says why).",
        {
            "call_id": "call_01J9ZB4M6D2S8E3Q1T7V5W9X0Y",
            "provider": "vllm",
            "model": "SmolLM2-135M-Instruct",
            "counted_by": "tokenizer",
            "tokenizer": "SmolLM2-135M-Instruct",
            "count_note": None,
            "sections": [
                {
                    "name": "system_prompt",
                    "label": "System prompt",
                    "tokens": 9,
                    "chars": 16,
                    "items": 1,
                    "text": "You are helpful.",
                },
                {
                    "name": "history",
                    "label": "History (the conversation's messages, the current one last)",
                    "tokens": 14,
                    "chars": 19,
                    "items": 1,
                    "text": "user: What is 12*7?",
                },
            ],
            "total_tokens": 23,
            "reported_prompt_tokens": 23,
            "window": 8192,
            "max_tokens": 256,
        },
    ),
    (
        "POST",
        "/v1/conversations/{conversation_id}/turns/{turn_id}/calls/{call_id}/replay",
    ): RouteDoc(
        "Sends the recorded call's request, as it was, to another model profile's model and "
        "returns its answer beside the recorded one. Nothing is written to the conversation. "
        "Admitted as a turn is (429 over concurrent turns or the day's tokens).",
        {
            "call_id": "call_01J9ZB4M6D2S8E3Q1T7V5W9X0Y",
            "model_profile_id": "big",
            "model_profile_version": 1,
            "provider": "openai",
            "model": "gpt-4o-mini",
            "request": {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": "What is 12*7?"}],
                "stream": True,
            },
            "response": {"content": "12*7 = 84", "tool_calls": [], "finish_reason": "stop"},
            "usage": {"prompt_tokens": 14, "completion_tokens": 6},
            "duration_s": 0.82,
            "first_token_s": 0.31,
            "status": "ok",
            "error": None,
            "original": {"content": "84", "tool_calls": [], "finish_reason": "stop"},
            "original_usage": {"prompt_tokens": 31, "completion_tokens": 2},
        },
        {"model_profile": "big"},
    ),
    ("GET", "/v1/operations"): RouteDoc(
        "The cluster at a glance, for operator (admin) keys (403 for any other): the conversation "
        "directory's resident actors against the cap, activations, evictions and waiting "
        "activations, with each resident actor's Ray actor id; the Serve deployments and their "
        "replicas by state; every client's model calls over the last `window_s` seconds; the "
        "Ray dashboard's port. A part that cannot be read is null, with a note.",
        {
            "residency": {
                "resident": 2,
                "max_resident": 1000,
                "peak_resident": 3,
                "activations": 5,
                "evictions": 3,
                "starting": 0,
                "waiting": 0,
                "idle": 1,
                "refused": 0,
                "actors": [
                    {
                        "conversation_id": CONV,
                        "name": f"conversation:{CONV}",
                        "actor_id": "4c1e6f0b0d2a5f3c8e9d7b6a01000000",
                    }
                ],
            },
            "deployments": [
                {
                    "application": "llm",
                    "name": "llm",
                    "status": "HEALTHY",
                    "replicas": {"RUNNING": 1},
                    "message": "",
                }
            ],
            "model_calls": {
                "window_s": 300,
                "totals": {
                    "calls": 42,
                    "failed_calls": 1,
                    "prompt_tokens": 51200,
                    "completion_tokens": 6300,
                    "cost": 0.0,
                    "currency": None,
                },
                "calls_per_minute": 8.4,
                "completion_tokens_per_s": 21.0,
            },
            "dashboard_port": 8265,
            "notes": [],
        },
    ),
    ("GET", "/v1/conversations/{conversation_id}/turns/{turn_id}/trace"): RouteDoc(
        "The turn's trace as a span tree across every process that worked on it (agent, model "
        "calls, tools, executor tasks, workflows, delegated turns); root is null while it runs.",
        {
            "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
            "root": {
                "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                "span_id": "00f067aa0ba902b7",
                "name": "invoke_agent helper",
                "start": T,
                "end": T,
                "duration_ms": 420.5,
                "status": "ok",
                "process": "conversation",
                "attributes": {"gen_ai.operation.name": "invoke_agent"},
                "children": [],
            },
        },
    ),
    ("GET", "/v1/conversations/{conversation_id}/turns/{turn_id}/links"): RouteDoc(
        "What the turn caused or used: hook runs, workflow runs, delegated turns, memory writes, "
        "the model.",
        {"items": [{"turn_id": TURN, "kind": "model", "target_id": "vllm/default", "at": T}]},
    ),
    ("GET", "/v1/conversations/{conversation_id}/turns/{turn_id}/usage"): RouteDoc(
        "The turn's model calls summed: calls, failures, tokens, estimated cost.", USAGE_EXAMPLE
    ),
    ("GET", "/v1/conversations/{conversation_id}/usage"): RouteDoc(
        "The conversation's model calls summed: calls, failures, tokens, estimated cost.",
        USAGE_EXAMPLE,
    ),
    ("GET", "/v1/usage"): RouteDoc(
        "Your client's model calls summed (one agent's with agent_id, since a time with since).",
        USAGE_EXAMPLE,
    ),
    ("GET", "/v1/conversations/{conversation_id}/export"): RouteDoc(
        "The conversation as one JSON bundle: its ended turns with their messages, moves and "
        "model calls (request and response bodies inline). `POST /v1/conversation-imports` "
        "takes it back, here or in another deployment.",
        BUNDLE,
    ),
    ("POST", "/v1/conversation-imports"): RouteDoc(
        "A new conversation of your client with the history of an exported bundle. Every id is "
        "new (the answer maps the bundle's turn ids to the new ones); agents you do not own are "
        "dropped, `agent_id` names yours that answers from now on. A bundle that is not "
        "consistent (an id twice, a row of a turn it lacks, a turn still running) is a 400.",
        {
            "conversation": {**CONVERSATION, "id": "conv_01JA"},
            "turn_ids": {TURN: "turn_01JA"},
            "messages": 2,
            "moves": 0,
            "model_calls": 1,
        },
        {"bundle": BUNDLE, "agent_id": AGENT},
    ),
    ("GET", "/v1/conversations/{conversation_id}/events"): RouteDoc(
        "The durable events (what the stream replays, without token deltas), by seq.",
        {
            "items": [{"seq": 1, "type": "conversation_started", "conversation_id": CONV, "at": T}],
            "older_before_seq": None,
        },
    ),
    ("GET", "/v1/threads/{turn_id}"): RouteDoc(
        "A turn with the chain of turns it continues from (across forks), its depth, tokens, "
        "whether anything continues from it, the persona that ran it and the thread's messages.",
        {
            "turn_id": TURN,
            "conversation_id": CONV,
            "ancestry": [TURN],
            "ancestry_conversations": [CONV],
            "depth": 1,
            "total_tokens": 221,
            "has_children": False,
            "persona": PERSONA,
            "messages": [MESSAGE],
        },
    ),
    ("PUT", "/v1/sessions/{label}"): RouteDoc(
        "Names a conversation with a stable label: an existing one, or a new one with an agent.",
        {"label": "atlas:main", "conversation_id": CONV, "head_turn_id": None, "created_at": T},
        {"agent_id": AGENT},
    ),
    ("GET", "/v1/sessions/{label}"): RouteDoc(
        "A session and its head: the latest turn of its conversation.",
        {"label": "atlas:main", "conversation_id": CONV, "head_turn_id": TURN, "created_at": T},
    ),
    ("DELETE", "/v1/sessions/{label}"): RouteDoc(
        "Removes the label; the conversation stays.", {"deleted": ["atlas:main"]}
    ),
    ("GET", "/v1/sessions"): RouteDoc(
        "Your sessions by label.",
        {
            "items": [
                {
                    "label": "atlas:main",
                    "conversation_id": CONV,
                    "head_turn_id": TURN,
                    "created_at": T,
                }
            ],
            "next_after": None,
        },
    ),
    ("POST", "/v1/messages"): RouteDoc(
        "Sends a message where `to` says: a thread (a turn: forked when it is not the tip), a "
        "session, or a persona (a new conversation); says where it went.",
        {
            "conversation_id": CONV,
            "turn_id": TURN,
            "message_id": MSG,
            "seq": 4,
            "forked": False,
            "session": "atlas:main",
        },
        {"content": "And tomorrow?", "to": {"session": "atlas:main"}},
    ),
    ("POST", "/v1/triggers"): RouteDoc(
        "A cron schedule that sends `template` as a message along `route` (at least "
        "WONDER_TRIGGER_MIN_INTERVAL_S between firings).",
        TRIGGER_OUT,
        {
            "schedule": "0 8 * * 1-5",
            "template": "Good morning: what is on today?",
            "route": {"session": "daily"},
        },
    ),
    ("GET", "/v1/triggers"): RouteDoc("Your cron triggers.", {"items": [TRIGGER_OUT]}),
    ("GET", "/v1/triggers/{trigger_id}"): RouteDoc(
        "A trigger and the times it fired.", {**TRIGGER_OUT, "fired": [T]}
    ),
    ("DELETE", "/v1/triggers/{trigger_id}"): RouteDoc(
        "Stops and deletes the trigger.", {"deleted": [TRIGGER]}
    ),
    ("PUT", "/v1/conversations/{conversation_id}/policy"): RouteDoc(
        "What a message arriving while a turn is active does: `parallel` (a turn beside it), "
        "`queue` (after it), `reject` (409), `interrupt` (cancels it).",
        {"concurrency_policy": "queue"},
        {"concurrency_policy": "queue"},
    ),
    ("POST", "/v1/conversations/{conversation_id}/turns/{turn_id}/cancel"): RouteDoc(
        "Cancels a running turn; its open tool calls are closed with an error result. The body "
        "is optional.",
        {"turn_id": TURN, "status": "cancelled"},
        {"reason": "not needed"},
    ),
    ("GET", "/v1/conversations/{conversation_id}/approvals"): RouteDoc(
        "The tool calls of the conversation's active turns that wait for a person's approval "
        "(a persona's `constraints.approvals` or a tool's `approval` asks it). Each says when "
        "it stops waiting (`expires_at`) and what it becomes then (`on_timeout`).",
        {
            "items": [
                {
                    "approval_id": "approval_01J9A7",
                    "turn_id": TURN,
                    "tool_call_id": "call_0",
                    "tool": "send_email",
                    "arguments": {"to": "ana@example.com", "subject": "Invoice"},
                    "timeout_s": 3600,
                    "on_timeout": "deny",
                    "requested_at": T,
                    "expires_at": "2026-01-06T11:14:02Z",
                }
            ]
        },
    ),
    ("POST", "/v1/conversations/{conversation_id}/approvals/{approval_id}"): RouteDoc(
        "Decides a waiting tool call: `approve` runs it as the model asked, `edit` runs it with "
        "`arguments` (checked against the tool's input schema: 422 otherwise), `deny` does not "
        "run it and the model hears it was denied (with `reason`). The turn goes on once no "
        "call of the same answer waits. 409 when it is decided already or its turn is over.",
        {
            "approval_id": "approval_01J9A7",
            "turn_id": TURN,
            "tool": "send_email",
            "decision": "edit",
            "arguments": {"to": "ana@example.com", "subject": "Invoice 2026-01"},
        },
        {"decision": "edit", "arguments": {"to": "ana@example.com", "subject": "Invoice 2026-01"}},
    ),
    ("POST", "/v1/conversations/{conversation_id}/participants"): RouteDoc(
        "Loops one of your agents in: from then on it answers messages that mention "
        "`@<agent_id>`, with the shared history.",
        {"agent_id": "agent_01K2", "joined": True},
        {"agent_id": "agent_01K2"},
    ),
    ("DELETE", "/v1/conversations/{conversation_id}/participants/{agent_id}"): RouteDoc(
        "The looped-in agent stops answering here.", {"agent_id": "agent_01K2", "left": True}
    ),
    ("POST", "/v1/workflows/{workflow_id}/runs"): RouteDoc(
        "Starts a run; the input is checked against the workflow's `input_schema` (400). With "
        "`wait_s` the answer waits up to that long for the run to end; with `project_id` the run "
        "works on its own branch.",
        RUN_OUT,
        {"input": {"width": 3, "length": 4.5}, "wait_s": 60},
    ),
    ("GET", "/v1/workflow-runs/{run_id}"): RouteDoc(
        "A run as it stands: status, output or error, events, and one record per node visit.",
        RUN_OUT,
    ),
    ("GET", "/v1/workflow-runs"): RouteDoc(
        "Your runs, newest first (`workflow_id`, `limit`).", {"items": [RUN_OUT["run"]]}
    ),
    ("POST", "/v1/workflow-runs/{run_id}/cancel"): RouteDoc(
        "Cancels the run and what it has running (tasks, child runs, agent turns).",
        {"run": {**RUN_OUT["run"], "status": "cancelled", "output": None}, "nodes": []},
        {"reason": "not needed"},
    ),
    ("POST", "/v1/workflow-runs/{run_id}/reruns"): RouteDoc(
        "Re-runs an ended run from one of its nodes: a new run of the same workflow version and "
        "input in which `from_node` and every node it reaches run again, and the other nodes take "
        "the recorded outputs of the run (their records carry `reused_from`). The new run's "
        "`rerun_of` names the run and node; the run itself is not changed. `input` replaces "
        "`from_node`'s input. 404: no such run or node; 409: the run has not ended, works on a "
        "project branch, never reached the node, or did not complete a node upstream of it.",
        {
            "run": {
                **RUN_OUT["run"],
                "id": "run_01J9RERUN",
                "rerun_of": {"run_id": RUN_OUT["run"]["id"], "node_id": "area", "node_input": None},
            },
            "nodes": [{**RUN_OUT["nodes"][0], "run_id": "run_01J9RERUN"}],
        },
        {"from_node": "area", "wait_s": 30},
    ),
    ("GET", "/v1/agents/{agent_id}/memories"): RouteDoc(
        "The agent's memories, newest first (`types`, `include_consolidated`, paged).",
        {"items": [MEMORY], "next_cursor": None},
    ),
    ("POST", "/v1/agents/{agent_id}/memories"): RouteDoc(
        "Stores a memory; with `dedupe: auto` a fact on a known `subject` updates that one.",
        {"action": "created", "memory": MEMORY},
        {
            "type": "fact",
            "subject": "user.city",
            "content": "The user lives in Lyon.",
            "significance": 0.7,
        },
    ),
    ("POST", "/v1/agents/{agent_id}/memories/search"): RouteDoc(
        "The memories nearest the query (vector, full text or hybrid), ranked with significance.",
        {"items": [{**MEMORY, "relevance": 0.82, "score": 0.78}]},
        {"query": "where does the user live?", "k": 5},
    ),
    ("GET", "/v1/agents/{agent_id}/memories/{memory_id}"): RouteDoc(
        "One memory with its full content.", MEMORY
    ),
    ("PATCH", "/v1/agents/{agent_id}/memories/{memory_id}"): RouteDoc(
        "Corrects one memory: the fields given change (`content`, `type`, `significance`, "
        "`subject` (null clears it), `metadata`), the others stay. A new `content` is embedded "
        "again, so searches find the new text; the earlier text is kept in `metadata.history`. "
        "A memory folded into a summary is not edited (409).",
        {
            **MEMORY,
            "content": "The user lives in Grenoble.",
            "metadata": {"history": [{"content": "The user lives in Lyon.", "updated_at": T}]},
            "updated_at": "2026-01-15T09:30:00Z",
        },
        {"content": "The user lives in Grenoble.", "significance": 0.8},
    ),
    ("DELETE", "/v1/agents/{agent_id}/memories/{memory_id}"): RouteDoc(
        "Deletes one memory.", {"deleted": ["mem_01J9"]}
    ),
    **{
        (method, "/v1/agents/{agent_id}/memory-upkeep" + tail): RouteDoc(description, UPKEEP, body)
        for method, tail, description, body in (
            ("GET", "", "The memory upkeep policy in force for the agent and its schedule.", None),
            ("PUT", "", "Sets the agent's own upkeep policy, over its persona's.", UPKEEP_POLICY),
            ("DELETE", "", "Drops the agent's own policy; its persona's is in force again.", None),
            (
                "POST",
                "/run",
                "Runs the upkeep at the scheduler's next tick (409 without a policy).",
                None,
            ),
        )
    },
    ("GET", "/v1/conversations/{conversation_id}/messages/search"): RouteDoc(
        "Messages of the conversation matching `q`: every term (`mode=text`, newest first) or the "
        "nearest by meaning (`mode=semantic`, with scores).",
        {
            "items": [
                {
                    "message": {
                        "id": MSG,
                        "turn_id": TURN,
                        "role": "user",
                        "content": "the ledger database",
                    },
                    "score": None,
                }
            ]
        },
    ),
    ("GET", "/v1/conversations/{conversation_id}/stats"): RouteDoc(
        "Counts and token totals of the conversation (a fork's inherited ones included).",
        {
            "conversation_id": CONV,
            "messages": 12,
            "turns": 6,
            "turns_by_status": {"completed": 6},
            "prompt_tokens": 5400,
            "completion_tokens": 610,
            "total_tokens": 6010,
            "inherited_messages": 0,
            "inherited_turns": 0,
        },
    ),
    ("GET", "/v1/conversations/{conversation_id}/context"): RouteDoc(
        "Every entry of the conversation's context channel (members read).",
        {"conversation_id": CONV, "entries": {"plan": {"steps": ["draft", "review"]}}},
    ),
    ("GET", "/v1/conversations/{conversation_id}/context/{key}"): RouteDoc(
        "One entry of the context channel.", {"key": "plan", "value": {"steps": ["draft"]}}
    ),
    ("PUT", "/v1/conversations/{conversation_id}/context/{key}"): RouteDoc(
        "Sets an entry of the context channel (writers only; at most 32 KiB as JSON).",
        {"key": "plan", "value": {"steps": ["draft"]}},
        {"value": {"steps": ["draft"]}},
    ),
    ("DELETE", "/v1/conversations/{conversation_id}/context/{key}"): RouteDoc(
        "Removes an entry of the context channel (writers only).", {"deleted": ["plan"]}
    ),
    ("POST", "/v1/projects"): RouteDoc(
        "A project: a new repository (201), or a clone of `repository` (202: it clones in the "
        "background; `status` says when it is ready). Local paths and URLs only where the "
        "operator allows them (403).",
        PROJECT_OUT,
        {"name": "notes"},
    ),
    ("GET", "/v1/projects"): RouteDoc("Your projects.", {"items": [PROJECT_OUT]}),
    ("GET", "/v1/projects/{project_id}"): RouteDoc(
        "A project, and how its clone goes (`status`, `error`).", PROJECT_OUT
    ),
    ("PATCH", "/v1/projects/{project_id}"): RouteDoc(
        "Renames the project, changes its default branch or whether merges push.",
        {**PROJECT_OUT, "name": "team notes"},
        {"name": "team notes"},
    ),
    ("DELETE", "/v1/projects/{project_id}"): RouteDoc(
        "Deletes a project no agent is scoped to (409 otherwise), with its workspaces.", None
    ),
    ("POST", "/v1/projects/{project_id}/push"): RouteDoc(
        "Pushes the default branch to the origin it was cloned from.",
        {"project_id": PROJECT, "branch": "main", "commit": "b41d9e2"},
    ),
    ("GET", "/v1/conversations/{conversation_id}/branch"): RouteDoc(
        "The conversation's working branch against the default branch.",
        {**BRANCH, "conversation_id": CONV},
    ),
    ("GET", "/v1/conversations/{conversation_id}/diff"): RouteDoc(
        "The branch's committed changes since it left the default branch.", DIFF
    ),
    ("POST", "/v1/conversations/{conversation_id}/merge"): RouteDoc(
        "Merges the branch into the default branch; a conflict changes nothing and answers "
        "409 naming the files. The body is optional.",
        MERGED,
        {"message": "Merge the notes"},
    ),
    ("GET", "/v1/conversations/{conversation_id}/workspace"): RouteDoc(
        "The workspace: its branch's head and the files changed but not committed.",
        {
            "workspace_id": CONV,
            "branch": f"wonder/conv-{CONV}",
            "head": "9c1e2f0",
            "worktree": f"/var/wonder/workspaces/{CONV}",
            "changed_files": ["draft.md"],
        },
    ),
    ("GET", "/v1/workflow-runs/{run_id}/branch"): RouteDoc(
        "The run's working branch against the default branch.",
        {**BRANCH, "run_id": RUN, "branch": f"wonder/run-{RUN}"},
    ),
    ("GET", "/v1/workflow-runs/{run_id}/diff"): RouteDoc(
        "The run's committed changes since its branch left the default branch.",
        {**DIFF, "branch": f"wonder/run-{RUN}"},
    ),
    ("POST", "/v1/workflow-runs/{run_id}/merge"): RouteDoc(
        "Merges the run's branch into the default branch (409 naming conflicting files).",
        MERGED,
        {"message": "Merge the notes"},
    ),
    ("GET", "/v1/quota"): RouteDoc("Your client's quota (unset fields: unlimited).", QUOTA),
    ("GET", "/v1/clients/{client_id}/quota"): RouteDoc(
        "Any client's quota (an operator key).", QUOTA
    ),
    ("PUT", "/v1/clients/{client_id}/quota"): RouteDoc(
        "Sets a client's quota (an operator key); omitted fields are unlimited.", QUOTA, QUOTA
    ),
    ("GET", "/v1/audit"): RouteDoc(
        "Recorded changes, oldest first: yours (an operator key: everyone's).",
        {
            "items": [
                {
                    "id": "aud_01J9",
                    "at": T,
                    "actor": f"client:{CLIENT}",
                    "client_id": CLIENT,
                    "action": "library.put",
                    "target": "personas:pirate",
                    "details": {"version": 1},
                }
            ],
            "next_cursor": None,
        },
    ),
    ("GET", "/v1/user-quotas"): RouteDoc(
        "Your users that have a quota of their own.",
        {"items": [{"user_id": "ann", "quota": USER_QUOTA}]},
    ),
    ("GET", "/v1/users/{user_id}/quota"): RouteDoc(
        "A user's own quota in your client (empty: only the client's applies).", USER_QUOTA
    ),
    ("PUT", "/v1/users/{user_id}/quota"): RouteDoc(
        "Sets a user's quota (an admin-scope key); omitted fields are unlimited.",
        USER_QUOTA,
        USER_QUOTA,
    ),
    ("DELETE", "/v1/users/{user_id}/quota"): RouteDoc(
        "Clears a user's quota: only the client's applies.", {}
    ),
    ("GET", "/v1/keys"): RouteDoc("Your client's keys, never their secrets.", {"items": [KEY_OUT]}),
    ("POST", "/v1/keys"): RouteDoc(
        "A new key; its secret (`api_key`) is shown once, here.",
        {"key": KEY_OUT, "api_key": "wk_01J9EXAMPLE"},
        {"name": "mobile app", "scope": "app", "expires_at": "2026-12-31T23:59:59Z"},
    ),
    ("GET", "/v1/keys/{key_id}"): RouteDoc("One of your client's keys.", KEY_OUT),
    ("POST", "/v1/keys/{key_id}/revoke"): RouteDoc(
        "The key stops working at once, on REST and on its open WebSockets.",
        {**KEY_OUT, "status": "revoked", "revoked_at": T},
    ),
    ("POST", "/v1/keys/{key_id}/rotate"): RouteDoc(
        "A new secret for the key (same name and scope); the old one is revoked, or expires "
        "after `grace_s`. The body is optional.",
        {"key": KEY_OUT, "api_key": "wk_01K2EXAMPLE"},
        {"grace_s": 300},
    ),
    ("PUT", "/v1/secrets/{name}"): RouteDoc(
        "Stores a secret's value (or a new version of it), sealed with the operator's key; the "
        "value is never returned.",
        SECRET,
        {"value": "sk-example"},
    ),
    ("GET", "/v1/secrets/{name}"): RouteDoc("A secret's metadata, without its value.", SECRET),
    ("DELETE", "/v1/secrets/{name}"): RouteDoc("Deletes the secret (an admin-scope key).", None),
    ("GET", "/v1/secrets"): RouteDoc(
        "Your secrets' names and metadata.", {"items": [SECRET], "next_cursor": None}
    ),
    ("GET", "/v1/conversations/{conversation_id}/members"): RouteDoc(
        "The users who may use the conversation, and at which level.", {"items": [MEMBER]}
    ),
    ("PUT", "/v1/conversations/{conversation_id}/members/{user_id}"): RouteDoc(
        "Grants a user a level: reader, writer, manager or owner (a manager grants up to "
        "manager; owner needs an owner).",
        MEMBER,
        {"level": "writer"},
    ),
    ("DELETE", "/v1/conversations/{conversation_id}/members/{user_id}"): RouteDoc(
        "Revokes a user's access; answers the members left.", {"items": []}
    ),
    ("POST", "/v1/stream-tickets"): RouteDoc(
        "A one-use ticket (30 s) for a browser to open a conversation's stream with `?ticket=` "
        "instead of putting a key in the URL.",
        {"ticket": "wt_01J9EXAMPLE", "conversation_id": CONV, "user_id": None, "expires_at": T},
        {"conversation_id": CONV},
    ),
    ("POST", "/v1/hooks"): RouteDoc(
        "A webhook: deliveries signed with its secret (shown once, here) become messages along "
        "`route`.",
        {**HOOK_OUT, "secret": "whsec_01J9EXAMPLE"},
        {"route": {"session": "inbox"}, "title": "Inbox"},
    ),
    ("GET", "/v1/hooks"): RouteDoc("Your webhooks, without secrets.", {"items": [HOOK_OUT]}),
    ("GET", "/v1/hooks/{hook_id}"): RouteDoc("A webhook, without its secret.", HOOK_OUT),
    ("DELETE", "/v1/hooks/{hook_id}"): RouteDoc("Deletes the webhook.", {"deleted": [HOOK]}),
    ("POST", "/v1/hooks/{hook_id}"): RouteDoc(
        "A delivery: authenticated by `X-Wonder-Signature` (sha256 HMAC of "
        "`<timestamp>.<body>` with the hook's secret) and `X-Wonder-Timestamp`, not by a key. "
        'The body (or its JSON `content`, as in `{"content": "Order #1234 arrived"}`) '
        "becomes a message; a repeat within the replay window "
        "answers 200 with the first's result.",
        {**DELIVERED, "forked": False, "session": "inbox", "replayed": False},
    ),
    ("POST", "/v1/agents/{agent_id}/chat/completions"): RouteDoc(
        "OpenAI chat completions answered by the agent (any `model`): one turn of it, with its "
        "persona, tools and memory, like a message posted to a conversation. The last message "
        "(the user's) is the turn's; in a new conversation the earlier ones are quoted before it, "
        "with `metadata.conversation_id` (a conversation with this agent you may post to) they "
        "are ignored. Answers a `chat.completion` (`id` is `chatcmpl-<turn id>`; the conversation "
        "in `conversation_id` and the `X-Wonder-Conversation` header), or with `stream: true` "
        "`chat.completion.chunk` server-sent events, then `[DONE]`. 422 for what would change "
        "the answer (client `tools`, `tool_choice` other than `none`, `n` above 1, a "
        "`response_format` other than text, `logprobs`, `tool` messages, over 200 messages or "
        "100,000 characters); sampling fields are accepted and left to the agent's model "
        "profile. 404: an agent not yours. A failed turn: 409 when asking again cannot help, 503 "
        "when it may or no answer came in time (in a stream: an `error` event before `[DONE]`).",
        COMPLETION,
        {"messages": [{"role": "user", "content": "What is 12*7?"}]},
    ),
    ("POST", "/v1/chat/completions"): RouteDoc(
        'The same as `POST /v1/agents/{agent_id}/chat/completions` with `model: "agent:<agent '
        'id>"`, so that an OpenAI client pointed at `/v1` talks to an agent; any other `model` '
        "is 404 (the local model's own OpenAI API is under its route prefix).",
        COMPLETION,
        {
            "model": f"agent:{AGENT}",
            "messages": [{"role": "user", "content": "What is 12*7?"}],
            "metadata": {"conversation_id": CONV},
        },
    ),
    ("PUT", "/v1/mcp-servers/{server_id}"): RouteDoc(
        "Registers (or changes) an MCP server: streamable HTTP (`url`, on the operator's "
        "WONDER_MCP_ALLOWED_HOSTS, else 403) or stdio (`command`: a program listed in "
        "WONDER_MCP_STDIO_COMMANDS, else 403, and its arguments, run in the sandbox without "
        "network). Wonder connects and stores each tool it lists as a tool of your library "
        "(`mcp.<server>.<name>`, `tool_ids`); the registration is stored only once that listing "
        "succeeded (503: unreachable). Credentials only as `secret_headers` naming your own "
        "secrets (400 for a name you have no secret under; `Authorization` and the like are "
        "refused as plain `headers`). An admin-scope key; audited.",
        MCP_SERVER,
        {
            "transport": "http",
            "url": "https://mcp.example.com/mcp",
            "secret_headers": {"Authorization": {"secret": "github-token", "prefix": "Bearer "}},
            "tool_prefix": "gh_",
        },
    ),
    ("GET", "/v1/mcp-servers/{server_id}"): RouteDoc(
        "One of your MCP servers: where it is, the secrets its headers name (never their "
        "values) and the library tools it gave.",
        MCP_SERVER,
    ),
    ("DELETE", "/v1/mcp-servers/{server_id}"): RouteDoc(
        "Removes the registration and closes its connection (an admin-scope key; audited). Its "
        "tools stay in the library; calling one answers NOT_FOUND.",
        None,
    ),
    ("POST", "/v1/mcp-servers/{server_id}/refresh"): RouteDoc(
        "Lists the server's tools again into your library and answers the registration with its "
        "`tool_ids` as they now are (an admin-scope key; audited; 503: unreachable).",
        {**MCP_SERVER, "tool_ids": [*MCP_TOOL_IDS, "mcp.github.close_issue"]},
    ),
    ("GET", "/v1/mcp-servers"): RouteDoc("Your MCP servers.", {"items": [MCP_SERVER]}),
    ("POST", "/mcp"): RouteDoc(
        "Wonder as an MCP server (streamable HTTP, stateless: each request is its own session, "
        "no `initialize` needed; send `Accept: application/json, text/event-stream`). "
        "`tools/list`: your agents (`?agents=a,b`: only those), each a tool named by its id; "
        "`tools/call` with `{message, conversation_id?}`: one turn of the agent, answered with "
        "its messages as text and `structuredContent` (conversation, turn, status, answer), "
        "`isError` when the turn failed, progress notifications with a `progressToken`. "
        "`resources/list` / `resources/read`: your conversations as "
        "`wonder://conversations/{id}` (one you may not read is not found). The answer is a "
        "JSON-RPC message in a server-sent `message` event. Same key and access rules as REST "
        "(401 without a key; `X-Wonder-User` for an acting user).",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {
                "content": [{"type": "text", "text": ANSWER}],
                "structuredContent": {
                    "conversation_id": CONV,
                    "turn_id": TURN,
                    "status": "completed",
                    "answer": ANSWER,
                },
                "isError": False,
            },
        },
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": AGENT, "arguments": {"message": "What is 12*7?"}},
        },
    ),
    ("GET", "/a2a/agents/{agent_id}/.well-known/agent-card.json"): RouteDoc(
        "The agent's A2A card: its name, one skill (the agent), its JSON-RPC endpoint "
        "`/a2a/agents/{agent_id}`, streaming, and a bearer Wonder API key as its security "
        "scheme. The card needs the key too (401); an agent not yours is 404.",
        A2A_CARD,
    ),
    ("POST", "/a2a/agents/{agent_id}"): RouteDoc(
        "The agent's A2A endpoint (JSON-RPC; A2A 1.0 method names with the `A2A-Version: 1.0` "
        "header, the 0.3 names without). `SendMessage`: one turn of the agent with the "
        "message's text and data parts (a file part is refused), in the conversation its "
        "`contextId` names or a new one; answered with the task once the turn ended "
        "(`returnImmediately`: at once, working). A task is a turn (its id the turn id, its "
        "`contextId` the conversation). `SendStreamingMessage` and `SubscribeToTask` answer "
        "server-sent events (the task, the answer in chunks, status updates); `GetTask`, "
        "`ListTasks` (one `contextId`'s) and `CancelTask` read and cancel turns. 401 without a "
        "key, 404 for an agent not yours; a task out of reach is `TaskNotFound`, other Wonder "
        "errors `InvalidParams` (`InternalError` when retriable) with the Wonder code in the "
        "details.",
        {"jsonrpc": "2.0", "id": 1, "result": {"task": A2A_TASK}},
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "m1",
                    "role": "ROLE_USER",
                    "parts": [{"text": "What is 12*7?"}],
                }
            },
        },
    ),
}


def _status(route: APIRoute) -> str:
    return str(route.status_code or 200)


def document(api: FastAPI) -> None:
    """Put each route's description and examples into ``api``'s OpenAPI document."""
    for route in api.routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        for method in route.methods:
            doc = ROUTES.get((method, route.path_format))
            if doc is None:
                continue
            route.description = doc.description
            extra: dict[str, Any] = dict(route.openapi_extra or {})
            if doc.response is not None:
                content = {"application/json": {"example": doc.response}}
                extra["responses"] = {_status(route): {"content": content}}
            if doc.request is not None:
                content = {"application/json": {"example": doc.request}}
                extra["requestBody"] = {"content": content}
            route.openapi_extra = extra

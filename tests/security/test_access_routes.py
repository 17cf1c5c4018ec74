"""Memberships on every route, against a real gateway over HTTP (Ray Serve).

Inside one client, a user who is not a member of a conversation must not reach it by ANY route:
not its own routes, not a thread (turn), a session label, a routing target, a hook, a trigger, a
workflow run working for it, a stream ticket. And the refusal must be the very answer the route
gives for an object that does not exist, so it tells nothing.

The routes come from the gateway's own ``/openapi.json``. Every route must be in exactly one
table here: ``PROBES`` (it reaches a conversation: the non-member is refused), ``LISTINGS`` (it
lists things: the non-member's listing holds none of the conversation's), or
``CONVERSATION_FREE`` (reviewed: it touches no conversation's content, with the reason). A route
added to the gateway and in none of them FAILS ``test_every_route_is_classified`` until someone
decides which it is, so a new route cannot ship without the check.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from core.hooks import signature
from core.ids import new_id, utc_now
from core.workflows import RunContext, WorkflowRun
from tests.conftest import Cluster, wait_for
from tests.factories import make_agent, make_client, scripted_profile
from tests.integration.test_gateway import deploy_gateway, http_client

pytestmark = pytest.mark.timeout(300)

STRANGER = "stranger"
OWNER = "own"
READER = "reader-u"
MISSING = {
    "conv": "conv_missing00000000000000",
    "turn": "turn_missing00000000000000",
    "label": "no-such-label",
    "hook": "hook_missing00000000000000",
    "trigger": "trigger_missing00000000000",
    "run": "run_missing000000000000000",
}
LIBRARY_KINDS = ("personas", "model-profiles", "tools", "tasks", "workflows")


@dataclass
class World:
    """One client, and a conversation its user ``own`` keeps private (shared with one reader),
    with everything that can point at it."""

    api: httpx.Client
    key: str
    client_id: str
    ids: dict[str, str] = field(default_factory=dict)

    def send(self, user: str | None, method: str, path: str, body: Any = None) -> httpx.Response:
        headers = {"X-Wonder-User": user} if user else {}
        if body is None:
            return self.api.request(method, path, headers=headers)
        return self.api.request(method, path, headers=headers, json=body)


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


def _ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, (response.request.url, response.text)
    return dict(response.json())


@pytest.fixture(scope="module")
def world(gateway_url: str, ray_cluster: Cluster) -> Iterator[World]:
    store = ray_cluster.store
    client_id, key = make_client(store, "access")
    with http_client(gateway_url, key) as api:
        made = World(api, key, client_id)
        agent = make_agent(store, client_id, scripted_profile(store))
        ids = made.ids
        ids["agent"] = agent.id
        conv = _ok(made.send(OWNER, "POST", "/v1/conversations", {"agent_id": agent.id}), 201)
        ids["conv"] = conv["id"]
        base = f"/v1/conversations/{conv['id']}"
        turn = _ok(made.send(OWNER, "POST", f"{base}/messages", {"content": "a secret"}), 202)
        ids["turn"] = turn["turn_id"]
        _ok(made.send(OWNER, "PUT", f"{base}/members/{READER}", {"level": "reader"}))
        _ok(made.send(OWNER, "PUT", f"{base}/context/plan", {"value": "a private plan"}))
        ids["label"] = f"private-{new_id().lower()}"
        body = {"conversation_id": conv["id"]}
        _ok(made.send(OWNER, "PUT", f"/v1/sessions/{ids['label']}", body), 201)
        hook = {"route": {"session": ids["label"]}, "title": "private"}
        ids["hook"] = _ok(made.send(OWNER, "POST", "/v1/hooks", hook), 201)["id"]
        trigger = {"schedule": "0 3 * * *", "template": "t", "route": {"thread": ids["turn"]}}
        ids["trigger"] = _ok(made.send(OWNER, "POST", "/v1/triggers", trigger), 201)["id"]
        # A run the conversation's agent started (its context names the conversation), as a
        # workflow tool call stores it.
        ids["run"] = new_id("run")
        store.workflow_runs.insert(
            WorkflowRun(
                id=ids["run"],
                workflow_id="echo",
                workflow_version=1,
                client_id=client_id,
                context=RunContext(
                    conversation_id=conv["id"], agent_id=agent.id, turn_id=ids["turn"]
                ),
                created_at=utc_now(),
            )
        )
        wait_for(
            lambda: (
                made.send(None, "GET", f"{base}/turns/{ids['turn']}").json()["status"] != "active"
            ),
            timeout=90,
            interval=0.2,
        )
        yield made


# --------------------------------------------------------------------------- the tables


@dataclass(frozen=True)
class Probe:
    """A request reaching the private conversation, and the same request for nothing."""

    method: str
    path: str
    missing_path: str
    body: Any = None
    missing_body: Any = None
    member_may_read: bool = False  # a GET: the owner's own request must not be a 404


Build = Callable[[dict[str, str]], Probe]


def _conv(method: str, suffix: str = "", body: Any = None) -> Build:
    def build(ids: dict[str, str]) -> Probe:
        real = f"/v1/conversations/{ids['conv']}{suffix.format(**ids)}"
        missing = f"/v1/conversations/{MISSING['conv']}{suffix.format(**ids)}"
        payload = json.loads(json.dumps(body).replace("{turn}", ids["turn"])) if body else body
        return Probe(method, real, missing, payload, payload, method == "GET")

    return build


def _by(kind: str, method: str, template: str, body: Any = None) -> Build:
    """A route reaching it through another object (``kind``: turn, label, hook, trigger, run)."""

    def build(ids: dict[str, str]) -> Probe:
        real = template.format(id=ids[kind])
        return Probe(method, real, template.format(id=MISSING[kind]), body, body, method == "GET")

    return build


def _body(method: str, path: str, make: Callable[[str], Any], kind: str) -> Build:
    """A route naming the conversation (or what leads to it) in its body."""

    def build(ids: dict[str, str]) -> Probe:
        return Probe(
            method, path.format(**ids), path.format(**ids), make(ids[kind]), make(MISSING[kind])
        )

    return build


def _chat(agent_id: str, conversation_id: str) -> dict[str, Any]:
    """An OpenAI chat-completions body continuing ``conversation_id`` with the agent."""
    return {
        "model": f"agent:{agent_id}",
        "messages": [{"role": "user", "content": "let me in"}],
        "metadata": {"conversation_id": conversation_id},
    }


def _fresh_label(ids: dict[str, str]) -> Probe:
    path = f"/v1/sessions/new-{new_id().lower()}"
    return Probe(
        "PUT", path, path, {"conversation_id": ids["conv"]}, {"conversation_id": MISSING["conv"]}
    )


PROBES: dict[tuple[str, str], Build] = {
    ("GET", "/v1/conversations/{conversation_id}"): _conv("GET"),
    ("DELETE", "/v1/conversations/{conversation_id}"): _conv("DELETE"),
    ("GET", "/v1/conversations/{conversation_id}/children"): _conv("GET", "/children"),
    ("POST", "/v1/conversations/{conversation_id}/complete"): _conv("POST", "/complete"),
    ("POST", "/v1/conversations/{conversation_id}/forks"): _conv(
        "POST", "/forks", {"turn_id": "{turn}"}
    ),
    ("GET", "/v1/conversations/{conversation_id}/forks"): _conv("GET", "/forks"),
    ("POST", "/v1/conversations/{conversation_id}/messages"): _conv(
        "POST", "/messages", {"content": "let me in"}
    ),
    ("GET", "/v1/conversations/{conversation_id}/messages"): _conv("GET", "/messages"),
    ("GET", "/v1/conversations/{conversation_id}/turns"): _conv("GET", "/turns"),
    ("GET", "/v1/conversations/{conversation_id}/messages/search"): _conv(
        "GET", "/messages/search?q=secret"
    ),
    ("GET", "/v1/conversations/{conversation_id}/stats"): _conv("GET", "/stats"),
    ("GET", "/v1/conversations/{conversation_id}/context"): _conv("GET", "/context"),
    ("GET", "/v1/conversations/{conversation_id}/context/{key}"): _conv("GET", "/context/plan"),
    ("PUT", "/v1/conversations/{conversation_id}/context/{key}"): _conv(
        "PUT", "/context/plan", {"value": "mine now"}
    ),
    ("DELETE", "/v1/conversations/{conversation_id}/context/{key}"): _conv(
        "DELETE", "/context/plan"
    ),
    ("GET", "/v1/conversations/{conversation_id}/turns/{turn_id}"): _conv("GET", "/turns/{turn}"),
    ("GET", "/v1/conversations/{conversation_id}/events"): _conv("GET", "/events"),
    **{
        ("GET", f"/v1/conversations/{{conversation_id}}/turns/{{turn_id}}/{part}"): _conv(
            "GET", f"/turns/{{turn}}/{part}"
        )
        for part in ("calls", "links", "trace", "usage")
    },
    ("GET", "/v1/conversations/{conversation_id}/usage"): _conv("GET", "/usage"),
    ("GET", "/v1/conversations/{conversation_id}/export"): _conv("GET", "/export"),
    # A call that is not there: the owner's own read is a 404 too (the call's id is checked
    # after the conversation's), so only the refusal is compared.
    ("GET", "/v1/conversations/{conversation_id}/turns/{turn_id}/calls/{call_id}/context"): (
        lambda ids: replace(
            _conv("GET", "/turns/{turn}/calls/call_none/context")(ids), member_may_read=False
        )
    ),
    ("POST", "/v1/conversations/{conversation_id}/turns/{turn_id}/calls/{call_id}/replay"): _conv(
        "POST", "/turns/{turn}/calls/call_none/replay", {"model_profile": "local"}
    ),
    ("PUT", "/v1/conversations/{conversation_id}/policy"): _conv(
        "PUT", "/policy", {"concurrency_policy": "queue"}
    ),
    ("POST", "/v1/conversations/{conversation_id}/turns/{turn_id}/cancel"): _conv(
        "POST", "/turns/{turn}/cancel"
    ),
    ("GET", "/v1/conversations/{conversation_id}/approvals"): _conv("GET", "/approvals"),
    ("POST", "/v1/conversations/{conversation_id}/approvals/{approval_id}"): _conv(
        "POST", "/approvals/approval_{turn}_1_0", {"decision": "approve"}
    ),
    ("POST", "/v1/conversations/{conversation_id}/participants"): _conv(
        "POST", "/participants", {"agent_id": "x1"}
    ),
    ("DELETE", "/v1/conversations/{conversation_id}/participants/{agent_id}"): _conv(
        "DELETE", "/participants/{agent}"
    ),
    ("GET", "/v1/conversations/{conversation_id}/branch"): _conv("GET", "/branch"),
    ("GET", "/v1/conversations/{conversation_id}/diff"): _conv("GET", "/diff"),
    ("POST", "/v1/conversations/{conversation_id}/merge"): _conv("POST", "/merge"),
    ("GET", "/v1/conversations/{conversation_id}/workspace"): _conv("GET", "/workspace"),
    ("GET", "/v1/conversations/{conversation_id}/members"): _conv("GET", "/members"),
    ("PUT", "/v1/conversations/{conversation_id}/members/{user_id}"): _conv(
        "PUT", f"/members/{STRANGER}", {"level": "owner"}
    ),
    ("DELETE", "/v1/conversations/{conversation_id}/members/{user_id}"): _conv(
        "DELETE", f"/members/{READER}"
    ),
    ("GET", "/v1/threads/{turn_id}"): _by("turn", "GET", "/v1/threads/{id}"),
    ("GET", "/v1/sessions/{label}"): _by("label", "GET", "/v1/sessions/{id}"),
    ("DELETE", "/v1/sessions/{label}"): _by("label", "DELETE", "/v1/sessions/{id}"),
    ("PUT", "/v1/sessions/{label}"): _fresh_label,
    ("POST", "/v1/messages"): _body(
        "POST", "/v1/messages", lambda t: {"content": "hi", "to": {"thread": t}}, "turn"
    ),
    ("POST", "/v1/hooks"): _body(
        "POST", "/v1/hooks", lambda label: {"route": {"session": label}}, "label"
    ),
    ("GET", "/v1/hooks/{hook_id}"): _by("hook", "GET", "/v1/hooks/{id}"),
    ("DELETE", "/v1/hooks/{hook_id}"): _by("hook", "DELETE", "/v1/hooks/{id}"),
    ("POST", "/v1/triggers"): _body(
        "POST",
        "/v1/triggers",
        lambda t: {"schedule": "0 3 * * *", "template": "t", "route": {"thread": t}},
        "turn",
    ),
    ("GET", "/v1/triggers/{trigger_id}"): _by("trigger", "GET", "/v1/triggers/{id}"),
    ("DELETE", "/v1/triggers/{trigger_id}"): _by("trigger", "DELETE", "/v1/triggers/{id}"),
    ("GET", "/v1/workflow-runs/{run_id}"): _by("run", "GET", "/v1/workflow-runs/{id}"),
    ("POST", "/v1/workflow-runs/{run_id}/cancel"): _by(
        "run", "POST", "/v1/workflow-runs/{id}/cancel", {"reason": "mine now"}
    ),
    ("GET", "/v1/workflow-runs/{run_id}/branch"): _by(
        "run", "GET", "/v1/workflow-runs/{id}/branch"
    ),
    ("GET", "/v1/workflow-runs/{run_id}/diff"): _by("run", "GET", "/v1/workflow-runs/{id}/diff"),
    ("POST", "/v1/workflow-runs/{run_id}/merge"): _by(
        "run", "POST", "/v1/workflow-runs/{id}/merge"
    ),
    ("POST", "/v1/workflow-runs/{run_id}/reruns"): _by(
        "run", "POST", "/v1/workflow-runs/{id}/reruns", {"from_node": "step"}
    ),
    ("POST", "/v1/stream-tickets"): _body(
        "POST", "/v1/stream-tickets", lambda c: {"conversation_id": c}, "conv"
    ),
    # OpenAI chat completions for agents: continuing a conversation posts to it.
    ("POST", "/v1/agents/{agent_id}/chat/completions"): _body(
        "POST",
        "/v1/agents/{agent}/chat/completions",
        lambda c: {
            "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"conversation_id": c},
        },
        "conv",
    ),
    ("POST", "/v1/chat/completions"): lambda ids: Probe(
        "POST",
        "/v1/chat/completions",
        "/v1/chat/completions",
        _chat(ids["agent"], ids["conv"]),
        _chat(ids["agent"], MISSING["conv"]),
    ),
}

# Listings: (path, the ids of the private conversation's things it must not show a stranger).
LISTINGS: dict[tuple[str, str], Callable[[dict[str, str]], tuple[str, list[str]]]] = {
    ("GET", "/v1/conversations"): lambda ids: ("/v1/conversations", [ids["conv"]]),
    ("GET", "/v1/sessions"): lambda ids: ("/v1/sessions", [ids["label"], ids["conv"]]),
    ("GET", "/v1/hooks"): lambda ids: ("/v1/hooks", [ids["hook"], ids["label"]]),
    ("GET", "/v1/triggers"): lambda ids: ("/v1/triggers", [ids["trigger"], ids["turn"]]),
    ("GET", "/v1/workflow-runs"): lambda ids: ("/v1/workflow-runs", [ids["run"], ids["conv"]]),
    ("GET", "/v1/audit"): lambda ids: ("/v1/audit", [ids["conv"], ids["hook"], ids["label"]]),
}

NOT_A_CONVERSATION = "touches no conversation's content"
CONVERSATION_FREE: dict[tuple[str, str], str] = {
    ("GET", "/healthz"): "liveness",
    **{
        (method, path.format(kind=kind)): "the client's library: " + NOT_A_CONVERSATION
        for kind in LIBRARY_KINDS
        for method, path in (
            ("PUT", "/v1/{kind}/{{obj_id}}"),
            ("GET", "/v1/{kind}/{{obj_id}}"),
            ("GET", "/v1/{kind}"),
            ("GET", "/v1/{kind}/{{obj_id}}/versions"),
        )
    },
    ("GET", "/v1/library/callables"): "the operator's registered callables",
    ("GET", "/v1/usage"): "the client's model calls summed (token and cost totals, optionally "
    "one agent's): no conversation's id or content",
    **{
        (method, path): "the client's MCP servers (tool sources of its library): "
        + NOT_A_CONVERSATION
        for method, path in (
            ("PUT", "/v1/mcp-servers/{server_id}"),
            ("GET", "/v1/mcp-servers/{server_id}"),
            ("DELETE", "/v1/mcp-servers/{server_id}"),
            ("GET", "/v1/mcp-servers"),
            ("POST", "/v1/mcp-servers/{server_id}/refresh"),
        )
    },
    **{
        (method, "/mcp"): "MCP's own protocol (JSON-RPC answers, not route statuses): each tool "
        "call and resource read is checked with the REST rules by serving.gateway.agent_turns "
        "(a non-member's call or read gets what a missing conversation gets: "
        "tests/integration/test_mcp_server.py::test_mcp_access_rules)"
        for method in ("POST",)
    },
    ("GET", "/a2a/agents/{agent_id}/.well-known/agent-card.json"): "an agent's A2A card: "
    "agents are the client's, shared by its users",
    ("POST", "/a2a/agents/{agent_id}"): "A2A's own protocol (JSON-RPC answers, not route "
    "statuses): each method is checked with the REST rules by serving.gateway.a2a "
    "(test_a2a_gives_a_non_member_what_a_missing_task_gets)",
    ("POST", "/v1/agents"): "agents are the client's, shared by its users",
    ("GET", "/v1/agents"): "agents are the client's, shared by its users",
    ("GET", "/v1/agents/{agent_id}"): "agents are the client's, shared by its users",
    ("POST", "/v1/conversations"): "starts a new conversation: its user owns it",
    ("POST", "/v1/conversation-imports"): "starts a new conversation from the bundle in its "
    "body (its user owns it); reads no stored conversation",
    ("POST", "/v1/workflows/{workflow_id}/runs"): "a run started over the API works for no "
    "conversation (the client's, like a project)",
    **{
        (method, path): "an agent's memories are the agent's, not a conversation's: every "
        "user of the client shares them (docs/security.md)"
        for method, path in (
            ("GET", "/v1/agents/{agent_id}/memories"),
            ("POST", "/v1/agents/{agent_id}/memories"),
            ("POST", "/v1/agents/{agent_id}/memories/search"),
            ("GET", "/v1/agents/{agent_id}/memories/{memory_id}"),
            ("PATCH", "/v1/agents/{agent_id}/memories/{memory_id}"),
            ("DELETE", "/v1/agents/{agent_id}/memories/{memory_id}"),
            ("GET", "/v1/agents/{agent_id}/memory-upkeep"),
            ("PUT", "/v1/agents/{agent_id}/memory-upkeep"),
            ("DELETE", "/v1/agents/{agent_id}/memory-upkeep"),
            ("POST", "/v1/agents/{agent_id}/memory-upkeep/run"),
        )
    },
    **{
        (method, path): "projects are the client's (a conversation's branch is reached through "
        "the conversation's routes, which are probed)"
        for method, path in (
            ("POST", "/v1/projects"),
            ("GET", "/v1/projects"),
            ("GET", "/v1/projects/{project_id}"),
            ("PATCH", "/v1/projects/{project_id}"),
            ("POST", "/v1/projects/{project_id}/push"),
            ("DELETE", "/v1/projects/{project_id}"),
        )
    },
    ("GET", "/v1/quota"): "the client's quota",
    ("GET", "/v1/operations"): "operator (admin) keys only, 403 for any other: the cluster's "
    "figures (resident actors, deployments, throughput)",
    ("GET", "/v1/clients/{client_id}/quota"): "operator route",
    ("PUT", "/v1/clients/{client_id}/quota"): "operator route",
    ("GET", "/v1/user-quotas"): "quotas",
    ("GET", "/v1/users/{user_id}/quota"): "quotas",
    ("PUT", "/v1/users/{user_id}/quota"): "quotas (admin-scope key)",
    ("DELETE", "/v1/users/{user_id}/quota"): "quotas (admin-scope key)",
    ("GET", "/v1/keys"): "the client's keys (admin-scope key)",
    ("POST", "/v1/keys"): "the client's keys (admin-scope key)",
    ("GET", "/v1/keys/{key_id}"): "the client's keys (admin-scope key)",
    ("POST", "/v1/keys/{key_id}/revoke"): "the client's keys (admin-scope key)",
    ("POST", "/v1/keys/{key_id}/rotate"): "the client's keys (admin-scope key)",
    **{
        (method, "/v1/secrets" + path): "the client's write-only secrets (admin-scope key to "
        "write); values are never returned"
        for method, path in (
            ("PUT", "/{name}"),
            ("GET", ""),
            ("GET", "/{name}"),
            ("DELETE", "/{name}"),
        )
    },
    ("POST", "/v1/hooks/{hook_id}"): "a delivery: no key and no user header, the hook's "
    "signature is the credential; it posts as the hook's maker, checked where it lands "
    "(test_a_hook_delivers_as_its_maker_and_stops_when_its_access_goes)",
}


def _routes(gateway_url: str) -> set[tuple[str, str]]:
    spec = httpx.get(f"{gateway_url}/openapi.json", timeout=30, trust_env=False).json()
    return {
        (method.upper(), path)
        for path, operations in spec["paths"].items()
        for method in operations
    }


def test_every_route_is_classified(gateway_url: str) -> None:
    routes = _routes(gateway_url)
    tables = [set(PROBES), set(LISTINGS), set(CONVERSATION_FREE)]
    unclassified = sorted(routes - set().union(*tables))
    twice = sorted(r for r in routes if sum(r in t for t in tables) > 1)
    stale = sorted(set().union(*tables) - routes)
    assert not unclassified, (
        "routes in no table: add each to PROBES (it reaches a conversation), LISTINGS, or "
        f"CONVERSATION_FREE with the reason: {unclassified}"
    )
    assert not twice and not stale, (twice, stale)


def _normal(text: str, ids: dict[str, str]) -> str:
    for value in sorted({*ids.values(), *MISSING.values()}, key=len, reverse=True):
        text = text.replace(value, "<id>")
    return text


def _snapshot(world: World) -> dict[str, Any]:
    ids, base = world.ids, f"/v1/conversations/{world.ids['conv']}"
    return {
        path: world.send(None, "GET", path).json()
        for path in (
            base,
            f"{base}/messages",
            f"{base}/context",
            f"{base}/turns",
            f"{base}/members",
            f"{base}/forks",
            f"/v1/sessions/{ids['label']}",
            f"/v1/hooks/{ids['hook']}",
            f"/v1/triggers/{ids['trigger']}",
            "/v1/sessions",
            "/v1/hooks",
            "/v1/triggers",
        )
    } | {"run": world.send(None, "GET", f"/v1/workflow-runs/{ids['run']}").json()["run"]}


def test_a_non_member_gets_what_a_missing_object_gets_on_every_route(world: World) -> None:
    problems: list[str] = []
    before = _snapshot(world)
    for (method, template), build in PROBES.items():
        probe = build(world.ids)
        name = f"{method} {template}"
        refused = world.send(STRANGER, probe.method, probe.path, probe.body)
        absent = world.send(STRANGER, probe.method, probe.missing_path, probe.missing_body)
        if refused.status_code not in (403, 404):
            problems.append(f"{name}: a non-member got {refused.status_code}: {refused.text}")
            continue
        if (refused.status_code, _normal(refused.text, world.ids)) != (
            absent.status_code,
            _normal(absent.text, world.ids),
        ):
            problems.append(
                f"{name}: a non-member's answer differs from a missing object's: "
                f"{refused.status_code} {refused.text} vs {absent.status_code} {absent.text}"
            )
    assert _snapshot(world) == before, "a refused request changed something"
    # The probes reach real objects: their owner's own reads of them are not a 404.
    for (method, template), build in PROBES.items():
        probe = build(world.ids)
        if probe.member_may_read:
            mine = world.send(OWNER, "GET", probe.path)
            if mine.status_code == 404:
                problems.append(f"{method} {template}: the owner got 404: {mine.text}")
    assert not problems, "\n".join(problems)


def test_listings_show_a_non_member_nothing_of_the_conversation(world: World) -> None:
    problems = []
    for (_method, template), build in LISTINGS.items():
        path, hidden = build(world.ids)
        theirs = world.send(STRANGER, "GET", path)
        mine = world.send(OWNER, "GET", path)
        assert theirs.status_code == 200 and mine.status_code == 200, (template, theirs.text)
        shown = [value for value in hidden if value in theirs.text]
        if shown:
            problems.append(f"GET {template} shows a non-member {shown}")
        if not all(value in mine.text for value in hidden[:1]):
            problems.append(f"GET {template}: its owner does not see {hidden[0]}: {mine.text}")
    assert not problems, "\n".join(problems)


def _a2a(world: World, user: str, method: str, params: dict[str, Any]) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"X-Wonder-User": user}
    if "/" not in method:  # the 1.0 names; a 0.3 client sends no version
        headers["A2A-Version"] = "1.0"
    return world.api.post(f"/a2a/agents/{world.ids['agent']}", json=body, headers=headers)


def _a2a_message(conversation_id: str) -> dict[str, Any]:
    return {
        "message": {
            "messageId": "m-probe",
            "role": "ROLE_USER",
            "parts": [{"text": "let me in"}],
            "contextId": conversation_id,
        }
    }


def _a2a_v03_message(conversation_id: str) -> dict[str, Any]:
    text = {"kind": "text", "text": "let me in"}
    message = {"messageId": "m-probe", "role": "user", "parts": [text]}
    return {"message": {**message, "contextId": conversation_id}}


# A2A methods that reach the private conversation: (method, its params for an id, which id).
A2A_PROBES: list[tuple[str, Callable[[str], dict[str, Any]], str]] = [
    ("SendMessage", _a2a_message, "conv"),
    ("SendStreamingMessage", _a2a_message, "conv"),
    ("ListTasks", lambda c: {"contextId": c}, "conv"),
    ("GetTask", lambda t: {"id": t}, "turn"),
    ("CancelTask", lambda t: {"id": t}, "turn"),
    ("SubscribeToTask", lambda t: {"id": t}, "turn"),
    ("message/send", _a2a_v03_message, "conv"),  # the 0.3 names reach the same handler
    ("tasks/get", lambda t: {"id": t}, "turn"),
]


def test_a2a_gives_a_non_member_what_a_missing_task_gets(world: World) -> None:
    """Every A2A method reaching the private conversation (its task, its context) answers a
    non-member exactly what it answers for a task or conversation that is not there, and
    changes nothing; its members read it."""
    problems: list[str] = []
    before = _snapshot(world)
    for method, params, kind in A2A_PROBES:
        refused = _a2a(world, STRANGER, method, params(world.ids[kind]))
        absent = _a2a(world, STRANGER, method, params(MISSING[kind]))
        if refused.status_code != 200 or "error" not in refused.json():
            problems.append(f"{method}: a non-member got {refused.status_code} {refused.text}")
            continue
        if _normal(refused.text, world.ids) != _normal(absent.text, world.ids):
            problems.append(f"{method}: {refused.text} differs from {absent.text}")
    assert _snapshot(world) == before, "a refused A2A call changed something"
    # The probes reach a real task: its reader reads it, and may not post to it.
    task = _a2a(world, READER, "GetTask", {"id": world.ids["turn"]}).json()
    assert task.get("result", {}).get("contextId") == world.ids["conv"], task
    sent = _a2a(world, READER, "SendMessage", _a2a_message(world.ids["conv"])).json()
    assert "error" in sent and "PERMISSION_DENIED" in json.dumps(sent), sent
    assert not problems, "\n".join(problems)


def _ticket(world: World, user: str) -> str:
    body = {"conversation_id": world.ids["conv"]}
    return str(_ok(world.send(user, "POST", "/v1/stream-tickets", body), 201)["ticket"])


def test_the_stream_refuses_a_non_member_however_it_connects(
    world: World, gateway_url: str
) -> None:
    ws_url = gateway_url.replace("http://", "ws://")
    stream = f"{ws_url}/v1/conversations/{world.ids['conv']}/stream"
    body = {"conversation_id": world.ids["conv"]}
    assert world.send(READER, "POST", "/v1/stream-tickets", body).status_code == 201
    ticket = world.send(STRANGER, "POST", "/v1/stream-tickets", body)
    assert ticket.status_code == 404, ticket.text
    assert ticket.json()["error"]["message"] == f"conversation {world.ids['conv']} not found"
    auth = {"Authorization": f"Bearer {world.key}"}
    not_found = f"conversation {world.ids['conv']} not found"
    attempts = [
        (stream, {**auth, "X-Wonder-User": STRANGER}, 4404, not_found),
        (f"{stream}?user_id={STRANGER}", auth, 4404, not_found),
        # A ticket issued to a member does not let another user in under it.
        (f"{stream}?user_id={STRANGER}&ticket={_ticket(world, READER)}", {}, 4401, READER),
    ]
    for url, headers, code, message in attempts:
        with connect(url, additional_headers=headers, proxy=None, open_timeout=30) as ws:
            frames = []
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    frames.append(json.loads(ws.recv(timeout=30)))
        assert closed.value.rcvd is not None and closed.value.rcvd.code == code, url
        assert frames[-1]["type"] == "error" and message in frames[-1]["error"]["message"]


def _deliver(gateway_url: str, hook_id: str, secret: str, content: str) -> httpx.Response:
    body = json.dumps({"content": content}).encode()
    stamp = str(int(utc_now().timestamp()))
    headers = {
        "X-Wonder-Timestamp": stamp,
        "X-Wonder-Signature": signature(secret, stamp, body),
        "Content-Type": "application/json",
    }
    return httpx.post(
        f"{gateway_url}/v1/hooks/{hook_id}",
        content=body,
        headers=headers,
        timeout=60,
        trust_env=False,
    )


def test_a_hook_delivers_as_its_maker_and_stops_when_its_access_goes(
    world: World, gateway_url: str
) -> None:
    """A hook is as good as its maker's key: it posts as that user, checked where it lands, so a
    user who loses access cannot keep writing into the conversation through a hook it made."""
    conv, label = world.ids["conv"], world.ids["label"]
    members = f"/v1/conversations/{conv}/members/hook-maker"
    _ok(world.send(OWNER, "PUT", members, {"level": "writer"}))
    made = _ok(world.send("hook-maker", "POST", "/v1/hooks", {"route": {"session": label}}), 201)
    assert made["user_id"] == "hook-maker"
    delivered = _deliver(gateway_url, made["id"], made["secret"], "build 42 failed")
    assert delivered.status_code == 202, delivered.text
    assert delivered.json()["conversation_id"] == conv
    _ok(world.send(OWNER, "DELETE", members))
    refused = _deliver(gateway_url, made["id"], made["secret"], "still here?")
    assert refused.status_code == 404, refused.text
    assert refused.json()["error"]["message"] == f"session {label} not found"
    texts = [
        m["content"]
        for m in world.send(None, "GET", f"/v1/conversations/{conv}/messages").json()["items"]
    ]
    assert "build 42 failed" in texts and "still here?" not in texts
    # Nor can another user see, read or delete the hook.
    assert world.send(STRANGER, "GET", f"/v1/hooks/{made['id']}").status_code == 404
    assert made["id"] not in world.send(STRANGER, "GET", "/v1/hooks").text

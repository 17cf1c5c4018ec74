"""The isolation sweep (issue 13), generated from the gateway's own ``/openapi.json``.

For every route with a path parameter, a second client asks about the first client's real objects
and must get a 404 that names the object it asked about (so the refusal is about ownership, not a
typo), and nothing it asked changes the first client's objects. Every route of a conversation is
also asked by a user of the first client who is not a member of it (``X-Wonder-User``): 404 too.
The first client's own ``GET``s of the same paths must find the objects (no 404), which shows the
sweep asks about real ones.

Nothing here lists routes: a route added to the gateway is swept as soon as it is in the OpenAPI.
A route the sweep cannot build a request for (an unknown path parameter, a body it cannot
generate) FAILS, naming the route; the fix is a factory below for the new parameter, or a
reviewed entry in ``EXEMPT`` for a route whose parameter names no object of the caller's.
The conversation WebSocket (not in the OpenAPI) is swept too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from core.ids import utc_now
from tests.conftest import Cluster, wait_for
from tests.factories import make_client
from tests.integration.mcp_fixtures import OwnServer, start_test_server
from tests.integration.test_gateway import deploy_gateway, http_client, unique
from tests.integration.test_gateway_stream import open_stream

pytestmark = pytest.mark.timeout(300)

LIBRARY_KINDS = ("personas", "model-profiles", "tools", "tasks", "workflows")

# Reviewed exemptions: routes whose path parameter is not an object the caller could own, with the
# status a second (non-operator) client gets and why. Each is still requested and its status
# checked; an entry naming a route that no longer exists fails the sweep.
EXEMPT: dict[tuple[str, str], tuple[int, str]] = {
    ("GET", "/v1/clients/{client_id}/quota"): (
        403,
        "operator route: the parameter names a client, and only operator keys may ask",
    ),
    ("PUT", "/v1/clients/{client_id}/quota"): (
        403,
        "operator route: the parameter names a client, and only operator keys may ask",
    ),
    **{
        ("PUT", f"/v1/{kind}/{{obj_id}}"): (
            200,
            "libraries are per client: the second client's PUT stores its own object of that "
            "id; the first client's object is checked unchanged",
        )
        for kind in LIBRARY_KINDS
    },
    ("PUT", "/v1/sessions/{label}"): (
        404,
        "session labels are per client: a second client's PUT names a session of its own; the "
        "conversation its example body names is none of its own (404), so nothing is stored",
    ),
    **{
        (method, "/v1/users/{user_id}/quota"): (
            200,
            "user ids are per client (the X-Wonder-User a client names): a second client's "
            "request reads or sets a quota of its own user of that name; the first client's "
            "user quota is checked unchanged",
        )
        for method in ("GET", "PUT", "DELETE")
    },
    ("PUT", "/v1/secrets/{name}"): (
        200,
        "secret names are per client: a second client's PUT stores a secret of its own under "
        "that name; the first client's secret is checked unchanged (its version)",
    ),
    ("PUT", "/v1/mcp-servers/{server_id}"): (
        200,
        "MCP server ids are per client: a second client's PUT (the first client's body) registers "
        "a server of its own under that id; the first client's registration is checked unchanged",
    ),
    ("POST", "/v1/hooks/{hook_id}"): (
        401,
        "webhook deliveries authenticate by the hook's HMAC signature, not by an API key: a "
        "caller without the hook's secret is refused 401 whoever it is",
    ),
}


@dataclass
class Owner:
    """The first client and one real object of each kind, made through the API."""

    api: httpx.Client
    client_id: str
    ids: dict[str, str] = field(default_factory=dict)
    library_bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    mcp_body: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, (response.request.url, response.text)
    return dict(response.json())


# "hi" is answered; "hold" calls the tool, whose calls wait for a person's approval (a day).
SCRIPT = [
    {"match": "hold", "tool_calls": [{"name": "echo", "arguments": {}}]},
    {"match": "hi", "reply": "hi"},
]


def _library(owner: Owner) -> None:
    api = owner.api
    task_id, workflow_id, tool_id = unique("task"), unique("wf"), unique("tool")
    profile_id, persona_id = unique("mp"), unique("persona")
    bodies: dict[str, tuple[str, dict[str, Any]]] = {
        "tasks": (
            task_id,
            {
                "actions": [
                    {"kind": "python", "params": {"callable": "library.workflows.steps:echo"}}
                ]
            },
        ),
        "workflows": (
            workflow_id,
            {"nodes": [{"id": "say", "kind": "task", "target_id": task_id}]},
        ),
        "tools": (
            tool_id,
            {
                "name": "echo",
                "description": "echo",
                "target_type": "task",
                "target_id": task_id,
                "approval": {"timeout_s": 86400},
            },
        ),
        "model-profiles": (profile_id, {"provider": "scripted", "script": SCRIPT}),
        "personas": (
            persona_id,
            {"system_prompt": "sweep", "model_profile_id": profile_id, "tool_ids": [tool_id]},
        ),
    }
    for kind, (obj_id, body) in bodies.items():
        ok(api.put(f"/v1/{kind}/{obj_id}", json=body))
        owner.ids[kind] = obj_id
        owner.library_bodies[kind] = body


def _conversation(owner: Owner) -> None:
    api = owner.api
    agent = ok(
        api.post("/v1/agents", json={"name": "a", "persona_ref": {"id": owner.ids["personas"]}}),
        201,
    )
    owner.ids["agent_id"] = agent["id"]
    conv = ok(api.post("/v1/conversations", json={"agent_id": agent["id"]}), 201)
    owner.ids["conversation_id"] = conv["id"]
    turn_id = ok(api.post(f"/v1/conversations/{conv['id']}/messages", json={"content": "hi"}), 202)[
        "turn_id"
    ]
    owner.ids["turn_id"] = turn_id
    ok(api.put(f"/v1/conversations/{conv['id']}/members/ann", json={"level": "owner"}))
    owner.ids["user_id"] = "ann"
    wait_for(
        lambda: (
            api.get(f"/v1/conversations/{conv['id']}/turns/{turn_id}").json()["status"] != "active"
        ),
        timeout=90,
        interval=0.2,
    )
    calls = f"/v1/conversations/{conv['id']}/turns/{turn_id}/calls"
    owner.ids["call_id"] = wait_for(
        lambda: next((c["id"] for c in api.get(calls).json()["items"]), None),
        timeout=60,
        interval=0.2,
    )
    ok(api.post(f"/v1/conversations/{conv['id']}/messages", json={"content": "hold"}), 202)
    owner.ids["approval_id"] = wait_for(
        lambda: next(
            (
                a["approval_id"]
                for a in api.get(f"/v1/conversations/{conv['id']}/approvals").json()["items"]
            ),
            None,
        ),
        timeout=90,
        interval=0.2,
    )


def _others(owner: Owner) -> None:
    api = owner.api
    run = ok(
        api.post(f"/v1/workflows/{owner.ids['workflows']}/runs", json={"input": {}, "wait_s": 60}),
        202,
    )
    owner.ids["run_id"] = run["run"]["id"]
    owner.ids["project_id"] = ok(api.post("/v1/projects", json={"name": "sweep"}), 201)["id"]
    memory = ok(
        api.post(f"/v1/agents/{owner.ids['agent_id']}/memories", json={"content": "a fact"}), 201
    )
    owner.ids["memory_id"] = memory["memory"]["id"]
    expiry = (utc_now() + timedelta(days=1)).isoformat()
    key = ok(api.post("/v1/keys", json={"name": "sweep", "expires_at": expiry}), 201)
    owner.ids["key_id"] = key["key"]["id"]
    conv, persona = owner.ids["conversation_id"], owner.ids["personas"]
    ok(api.put("/v1/sessions/sweep", json={"conversation_id": conv}), 201)
    owner.ids["label"] = "sweep"
    hook = ok(api.post("/v1/hooks", json={"route": {"persona": persona}, "title": "sweep"}), 201)
    owner.ids["hook_id"] = hook["id"]
    trigger = {"schedule": "0 3 * * *", "template": "tick", "route": {"persona": persona}}
    owner.ids["trigger_id"] = ok(api.post("/v1/triggers", json=trigger), 201)["id"]
    ok(api.put(f"/v1/users/{owner.ids['user_id']}/quota", json={"concurrent_turns": 3}))
    ok(api.put("/v1/secrets/sweep-token", json={"value": "s3cr3t-of-the-owner"}))
    owner.ids["secret"] = "sweep-token"
    ok(api.put(f"/v1/conversations/{conv}/context/sweep-plan", json={"value": {"step": 1}}))
    owner.ids["context_key"] = "sweep-plan"


def _mcp_server(owner: Owner, server: OwnServer) -> None:
    owner.mcp_body = {"transport": "http", "url": server.url}
    owner.ids["server_id"] = "sweep-mcp"
    ok(owner.api.put("/v1/mcp-servers/sweep-mcp", json=owner.mcp_body))


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[OwnServer]:
    server = start_test_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def owner(
    gateway_url: str, ray_cluster: Cluster, embedder_app: str, mcp_server: OwnServer
) -> Iterator[Owner]:
    client_id, key = make_client(ray_cluster.store, "sweep-owner")
    with http_client(gateway_url, key) as api:
        # Making the objects waits on turns and a workflow run (wait_s 60): on a loaded machine
        # they answer after the default 30 s.
        api.timeout = httpx.Timeout(120)
        made = Owner(api, client_id)
        _library(made)
        _conversation(made)
        _others(made)
        _mcp_server(made, mcp_server)
        try:
            yield made
        finally:
            # Its "hold" turn waits a day for an approval: deleting the conversation stops its
            # actor, which would otherwise stay resident and busy for the rest of the session
            # (a later test that lowers the resident cap would find no room).
            made.api.delete(f"/v1/conversations/{made.ids['conversation_id']}")


@pytest.fixture(scope="module")
def intruder(gateway_url: str, ray_cluster: Cluster) -> Iterator[httpx.Client]:
    _, key = make_client(ray_cluster.store, "sweep-intruder")
    with http_client(gateway_url, key) as api:
        yield api


# --------------------------------------------------------------------------- building requests


def _library_kind(path: str) -> str:
    kind = path.split("/")[2]
    if kind not in LIBRARY_KINDS:
        raise LookupError(f"obj_id under /v1/{kind}: not a library kind the sweep knows")
    return kind


# How to fill each path parameter with the first client's object. A new parameter name fails the
# sweep until it has a factory here (or its route an entry in EXEMPT).
FACTORIES: dict[str, Callable[[Owner, str], str]] = {
    "obj_id": lambda o, path: o.ids[_library_kind(path)],
    "workflow_id": lambda o, _path: o.ids["workflows"],
    "agent_id": lambda o, _path: o.ids["agent_id"],
    "conversation_id": lambda o, _path: o.ids["conversation_id"],
    "turn_id": lambda o, _path: o.ids["turn_id"],
    "run_id": lambda o, _path: o.ids["run_id"],
    "project_id": lambda o, _path: o.ids["project_id"],
    "memory_id": lambda o, _path: o.ids["memory_id"],
    "key_id": lambda o, _path: o.ids["key_id"],
    "client_id": lambda o, _path: o.client_id,
    "user_id": lambda o, _path: o.ids["user_id"],
    "label": lambda o, _path: o.ids["label"],
    "hook_id": lambda o, _path: o.ids["hook_id"],
    "trigger_id": lambda o, _path: o.ids["trigger_id"],
    "name": lambda o, path: _secret_name(o, path),
    "server_id": lambda o, _path: o.ids["server_id"],
    "key": lambda o, path: _context_key(o, path),
    "call_id": lambda o, _path: o.ids["call_id"],
    "approval_id": lambda o, _path: o.ids["approval_id"],
}


def _context_key(owner: Owner, path: str) -> str:
    if not path.startswith("/v1/conversations/{conversation_id}/context/"):
        raise LookupError(f"{{key}} in {path}: not a context entry's key, the sweep knows no other")
    return owner.ids["context_key"]


def _secret_name(owner: Owner, path: str) -> str:
    if not path.startswith("/v1/secrets/"):
        raise LookupError(f"{{name}} in {path}: not a secret's name, the sweep knows no other")
    return owner.ids["secret"]


class CannotBuild(Exception):
    """The sweep does not know how to build a request for a route (fails the sweep)."""


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = spec["components"]["schemas"][name]
    return schema


def example(schema: dict[str, Any], spec: dict[str, Any], where: str) -> Any:
    """A minimal valid value of a JSON Schema: required fields only, first choices."""
    schema = _resolve(schema, spec)
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for combinator in ("anyOf", "oneOf", "allOf"):
        if combinator in schema:
            options = [o for o in schema[combinator] if _resolve(o, spec).get("type") != "null"]
            return example(options[0], spec, where)
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        names = list(schema.get("required", []))
        # ``minProperties``: optional fields too, in order, until there are enough.
        names += [k for k in props if k not in names][
            : max(0, schema.get("minProperties", 0) - len(names))
        ]
        return {k: example(props[k], spec, f"{where}.{k}") for k in names}
    if kind == "array":
        count = schema.get("minItems", 0)
        return [example(schema.get("items", {}), spec, f"{where}[]") for _ in range(count)]
    if kind == "string":
        if schema.get("format") == "date-time":
            return (utc_now() + timedelta(days=1)).isoformat()
        pattern = schema.get("pattern")
        if pattern is None or re.search(pattern, "x1"):
            return "x1"
        choices = re.fullmatch(r"\^\(([\w|]+)\)\$", pattern)  # ^(a|b|c)$: the first
        if choices:
            return choices.group(1).split("|")[0]
        raise CannotBuild(f"{where}: no example for pattern {pattern!r}")
    if kind in ("integer", "number"):
        return max(schema.get("minimum", 1), 1)
    if kind == "boolean":
        return False
    if kind is None and not schema.keys() - {"title", "description", "examples"}:
        return "x1"  # any JSON value
    raise CannotBuild(f"{where}: no example for schema {schema!r}")


@dataclass(frozen=True)
class Probe:
    method: str
    template: str
    path: str
    values: tuple[str, ...]
    body: Any


def probes(spec: dict[str, Any], owner: Owner) -> tuple[list[Probe], list[str]]:
    """A request for every route with a path parameter, and what could not be built."""
    built: list[Probe] = []
    problems: list[str] = []
    for template, operations in spec["paths"].items():
        params = re.findall(r"{([^}]+)}", template)
        if not params:
            continue
        for method, operation in operations.items():
            name = f"{method.upper()} {template}"
            try:
                values = {p: _fill(p, owner, template) for p in params}
                body = _body(method.upper(), template, operation, spec, owner)
            except (CannotBuild, LookupError) as exc:
                problems.append(f"{name}: {exc}")
                continue
            path = template.format(**values) + _query(operation, spec, name)
            built.append(Probe(method.upper(), template, path, tuple(values.values()), body))
    return built, problems


def _query(operation: dict[str, Any], spec: dict[str, Any], where: str) -> str:
    """The operation's required query parameters (a search's ``q``), as a query string."""
    required = {
        p["name"]: example(p.get("schema", {}), spec, f"{where} ?{p['name']}")
        for p in operation.get("parameters", [])
        if p.get("in") == "query" and p.get("required")
    }
    return f"?{urlencode(required)}" if required else ""


def _fill(param: str, owner: Owner, template: str) -> str:
    if param not in FACTORIES:
        raise CannotBuild(f"no factory for path parameter {param!r}: add one to FACTORIES")
    return FACTORIES[param](owner, template)


def _body(
    method: str, template: str, operation: dict[str, Any], spec: dict[str, Any], owner: Owner
) -> Any:
    if method == "PUT" and template.split("/")[2] in LIBRARY_KINDS:
        return owner.library_bodies[_library_kind(template)]
    if method == "PUT" and template == "/v1/mcp-servers/{server_id}":
        return owner.mcp_body
    if template.endswith("/chat/completions"):  # the last message must be the user's
        return {"model": "agent", "messages": [{"role": "user", "content": "hi"}]}
    request_body = operation.get("requestBody")
    if request_body is None:
        return None
    content = request_body["content"]["application/json"]
    if "schema" not in content:  # a protocol route (JSON-RPC) documents an example body only
        return content["example"]
    return example(content["schema"], spec, f"{method} {template} body")


# --------------------------------------------------------------------------- the sweep


def _send(api: httpx.Client, probe: Probe, headers: dict[str, str] | None = None) -> httpx.Response:
    if probe.body is None:
        return api.request(probe.method, probe.path, headers=headers)
    return api.request(probe.method, probe.path, json=probe.body, headers=headers)


def _stranger_problem(probe: Probe, response: httpx.Response) -> str | None:
    """A user of the same client who is not a member: 404, naming the conversation."""
    name = f"{probe.method} {probe.template}"
    if response.status_code != 404:
        return f"{name}: a non-member user got {response.status_code}: {response.text}"
    if not any(value in response.text for value in probe.values):
        return f"{name}: the non-member's 404 names none of {probe.values}: {response.text}"
    return None


def _refusal_problem(probe: Probe, response: httpx.Response) -> str | None:
    name = f"{probe.method} {probe.template}"
    expected = EXEMPT.get((probe.method, probe.template))
    if expected is not None:
        status, _why = expected
        if response.status_code != status:
            return f"{name}: exempt with {status}, got {response.status_code} {response.text}"
        return None
    if response.status_code != 404:
        return f"{name}: another client got {response.status_code}, not 404: {response.text}"
    message = response.json().get("error", {}).get("message", "")
    if not any(value in message for value in probe.values):
        return f"{name}: the 404 names none of {probe.values}: {message!r}"
    return None


def _snapshot(owner: Owner) -> dict[str, Any]:
    """What the sweep must leave as it was: the first client's objects, as it reads them."""
    api, ids = owner.api, owner.ids
    conv = ids["conversation_id"]
    return {
        "conversation": ok(api.get(f"/v1/conversations/{conv}")),
        "messages": ok(api.get(f"/v1/conversations/{conv}/messages")),
        "turns": ok(api.get(f"/v1/conversations/{conv}/turns")),
        "members": ok(api.get(f"/v1/conversations/{conv}/members")),
        "agent": ok(api.get(f"/v1/agents/{ids['agent_id']}")),
        "run": ok(api.get(f"/v1/workflow-runs/{ids['run_id']}"))["run"]["status"],
        "project": ok(api.get(f"/v1/projects/{ids['project_id']}")),
        "memory": ok(api.get(f"/v1/agents/{ids['agent_id']}/memories/{ids['memory_id']}")),
        "key": ok(api.get(f"/v1/keys/{ids['key_id']}")),
        "session": ok(api.get(f"/v1/sessions/{ids['label']}")),
        "hook": ok(api.get(f"/v1/hooks/{ids['hook_id']}")),
        "trigger": ok(api.get(f"/v1/triggers/{ids['trigger_id']}")),
        "user_quota": ok(api.get(f"/v1/users/{ids['user_id']}/quota")),
        "secret": ok(api.get(f"/v1/secrets/{ids['secret']}")),
        "mcp_server": ok(api.get(f"/v1/mcp-servers/{ids['server_id']}")),
        "context": ok(api.get(f"/v1/conversations/{conv}/context")),
        "approvals": ok(api.get(f"/v1/conversations/{conv}/approvals")),
        "memory_upkeep": ok(api.get(f"/v1/agents/{ids['agent_id']}/memory-upkeep")),
        "library": {
            kind: ok(api.get(f"/v1/{kind}/{ids[kind]}/versions")) for kind in LIBRARY_KINDS
        },
        "runs": len(ok(api.get("/v1/workflow-runs"))["items"]),
    }


def test_every_route_with_a_path_parameter_hides_other_clients_objects(
    gateway_url: str, owner: Owner, intruder: httpx.Client
) -> None:
    spec = ok(httpx.get(f"{gateway_url}/openapi.json", timeout=30, trust_env=False))
    built, problems = probes(spec, owner)
    swept = {(p.method, p.template) for p in built}
    stale = [
        f"EXEMPT names {m} {t}, which is not a route" for m, t in EXEMPT if (m, t) not in swept
    ]
    before = _snapshot(owner)
    # A user of the first client who is not a member of its conversation: as if it did not exist.
    stranger = {"X-Wonder-User": "sweep-stranger"}
    for probe in built:
        if "{conversation_id}" in probe.template:
            problem = _stranger_problem(probe, _send(owner.api, probe, stranger))
            if problem:
                problems.append(problem)
    # The exempt routes last: a second client's library PUT creates its own object of that id,
    # which its later reads would find.
    for probe in sorted(built, key=lambda p: (p.method, p.template) in EXEMPT):
        problem = _refusal_problem(probe, _send(intruder, probe))
        if problem:
            problems.append(problem)
    assert _snapshot(owner) == before, "a refused request changed the first client's objects"
    # The first client's own reads of the same paths find the objects (a route may still refuse
    # for another reason: a conversation without a project has no branch, a 400).
    for probe in built:
        if probe.method == "GET":
            response = owner.api.get(probe.path)
            if response.status_code == 404:
                problems.append(f"GET {probe.template}: the owner got 404: {response.text}")
    assert not problems + stale, "\n".join(problems + stale)
    assert len(built) >= 40  # every route with a path parameter (48 when this was written)


def test_another_clients_stream_is_not_found(
    gateway_url: str, owner: Owner, ray_cluster: Cluster
) -> None:
    _, key = make_client(ray_cluster.store, "sweep-streamer")
    with open_stream(gateway_url, owner.ids["conversation_id"], key) as ws:
        frames = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                frames.append(json.loads(ws.recv(timeout=30)))
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404
    assert frames[-1]["error"]["code"] == "NOT_FOUND"

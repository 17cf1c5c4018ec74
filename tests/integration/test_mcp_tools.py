"""MCP servers as tool sources, for real: the reference server ``server-everything`` registered
over stdio (run in the sandbox) and over streamable HTTP (on 127.0.0.1, listed in the session's
``WONDER_MCP_ALLOWED_HOSTS``), its tools imported into the client's library and called by a
conversation through the real agent loop (a scripted model chooses them), over the gateway on the
session's Ray. A server of our own (``mcp_test_server.py``) shows what reached it (credentials
from the client's secrets) and changes its tool list, which the library follows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Cluster, free_port, wait_for
from tests.factories import make_client
from tests.integration.mcp_fixtures import (
    EVERYTHING,
    NODE,
    NodeServer,
    OwnServer,
    start_everything_http,
    start_test_server,
)
from tests.integration.test_gateway import deploy_gateway, error_of, http_client, unique
from tests.security.listener import Listening


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def api(gateway_url: str, ray_cluster: Cluster) -> Iterator[httpx.Client]:
    with http_client(gateway_url, make_client(ray_cluster.store, "mcp-user")[1]) as client:
        client.timeout = httpx.Timeout(120)
        yield client


@pytest.fixture(scope="module")
def everything_http() -> Iterator[NodeServer]:
    server = start_everything_http()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_server() -> Iterator[OwnServer]:
    server = start_test_server()
    try:
        yield server
    finally:
        server.stop()


def register(api: httpx.Client, server_id: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api.put(f"/v1/mcp-servers/{server_id}", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def agent_with_tools(api: httpx.Client, tool_ids: list[str], script: list[dict[str, Any]]) -> str:
    profile_id, persona_id = unique("scripted"), unique("persona")
    profile = {"provider": "scripted", "model": "script", "script": script}
    assert api.put(f"/v1/model-profiles/{profile_id}", json=profile).status_code == 200
    persona = {"system_prompt": "Use the tools.", "model_profile_id": profile_id}
    persona["tool_ids"] = tool_ids  # type: ignore[assignment]
    assert api.put(f"/v1/personas/{persona_id}", json=persona).status_code == 200, persona
    agent = api.post("/v1/agents", json={"name": "mcp", "persona_ref": {"id": persona_id}})
    assert agent.status_code == 201, agent.text
    return str(agent.json()["id"])


def run_turn(api: httpx.Client, agent_id: str, content: str) -> dict[str, Any]:
    conversation = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    posted = api.post(f"/v1/conversations/{conversation}/messages", json={"content": content})
    assert posted.status_code == 202, posted.text
    turn_path = f"/v1/conversations/{conversation}/turns/{posted.json()['turn_id']}"

    def ended() -> dict[str, Any] | None:
        turn = api.get(turn_path).json()
        return turn if turn["status"] in ("completed", "failed") else None

    return wait_for(ended, timeout=180, interval=0.5)


def results_by_tool(turn: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        move["tool_call"]["name"]: move["tool_result"]
        for move in turn["moves"]
        if move.get("tool_call") is not None
    }


def test_stdio_server_in_the_sandbox_through_the_agent_loop(api: httpx.Client) -> None:
    server_id = unique("everything-stdio")
    server = register(api, server_id, {"transport": "stdio", "command": [NODE, EVERYTHING]})
    assert {f"mcp.{server_id}.echo", f"mcp.{server_id}.get-sum"} <= set(server["tool_ids"])
    echo = api.get(f"/v1/tools/mcp.{server_id}.echo").json()
    assert echo["target_type"] == "mcp" and echo["target_id"] == f"{server_id}/echo"
    assert echo["input_schema"]["properties"]["message"]["type"] == "string"

    tools = [f"mcp.{server_id}.{name}" for name in ("echo", "get-sum", "get-env")]
    script = [
        {
            "tool_calls": [
                {"name": "echo", "arguments": {"message": "hello over stdio"}},
                {"name": "get-sum", "arguments": {"a": 2, "b": 40}},
            ]
        },
        {"tool_calls": [{"name": "get-env", "arguments": {}}]},
        {"reply": "done: {{last_tool}}"},
    ]
    turn = run_turn(api, agent_with_tools(api, tools, script), "use the MCP tools")
    assert turn["status"] == "completed", turn
    results = results_by_tool(turn)
    assert results["echo"]["success"] and "hello over stdio" in results["echo"]["result"]["content"]
    assert results["get-sum"]["success"] and "42" in results["get-sum"]["result"]["content"]
    # The server ran in the sandbox: its environment is the sandbox's cleared one, nothing of
    # the host's (no Wonder settings, no Ray variables, no credentials).
    environment = json.loads(results["get-env"]["result"]["content"])
    assert set(environment) <= {"PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "_"}, environment
    assert environment["HOME"] == "/tmp"


def test_http_server_through_the_agent_loop(api: httpx.Client, everything_http: NodeServer) -> None:
    server_id = unique("everything-http")
    server = register(api, server_id, {"transport": "http", "url": everything_http.url})
    assert f"mcp.{server_id}.get-sum" in server["tool_ids"]
    tools = [f"mcp.{server_id}.echo", f"mcp.{server_id}.get-sum"]
    script = [
        {"tool_calls": [{"name": "get-sum", "arguments": {"a": 20, "b": 22}}]},
        {"tool_calls": [{"name": "echo", "arguments": {"message": "over http"}}]},
        {"tool_calls": [{"name": "get-sum", "arguments": {"a": "not a number"}}]},
        {"reply": "the sum was {{last_tool}}"},
    ]
    turn = run_turn(api, agent_with_tools(api, tools, script), "add")
    assert turn["status"] == "completed", turn
    moves = [m for m in turn["moves"] if m.get("tool_call")]
    assert [m["tool_call"]["name"] for m in moves] == ["get-sum", "echo", "get-sum"]
    assert "42" in moves[0]["tool_result"]["result"]["content"]
    assert "over http" in moves[1]["tool_result"]["result"]["content"]
    # Invalid arguments are refused before dispatch by the imported schema (a business error the
    # model sees), never a crash of the turn.
    refused = moves[2]["tool_result"]
    assert refused["success"] is False and refused["error"]["code"] == "INVALID_INPUT"


def test_registration_refusals(api: httpx.Client, ray_cluster: Cluster) -> None:
    def refused(server_id: str, body: dict[str, Any]) -> tuple[int, str]:
        response = api.put(f"/v1/mcp-servers/{server_id}", json=body)
        assert 400 <= response.status_code < 500, response.text
        return response.status_code, response.json()["error"]["message"]

    # Not on the operator's allow-list: refused before anything connects (no packet leaves).
    for url in (
        "http://10.0.0.1/mcp",
        "http://169.254.169.254/latest",
        f"http://localhost:{free_port()}/mcp",
        "http://[::1]/mcp",
        "http://metadata.internal/mcp",
    ):
        status, message = refused(unique("bad"), {"transport": "http", "url": url})
        assert status == 403 and "WONDER_MCP_ALLOWED_HOSTS" in message, message
    assert refused(unique("bad"), {"transport": "http", "url": "file:///etc/passwd"})[0] == 400
    creds = "http://user:pw@127.0.0.1:1/mcp"
    assert refused(unique("bad"), {"transport": "http", "url": creds})[0] == 400
    # Credentials only by secret reference, never in clear.
    plain_auth = {"transport": "http", "url": "http://127.0.0.1:1/mcp"}
    plain_auth["headers"] = {"Authorization": "Bearer sk-live"}  # type: ignore[assignment]
    assert refused(unique("bad"), plain_auth)[0] == 422
    # A stdio server is a program and its arguments (no url, no headers).
    both = {"transport": "stdio", "command": ["x"], "url": "http://127.0.0.1:1/"}
    assert refused(unique("bad"), both)[0] == 422
    # Only a program the operator listed (WONDER_MCP_STDIO_COMMANDS: the npm Node here), matched
    # as written: refused before anything starts.
    for command in (["/bin/sh", "-c", f"{NODE} {EVERYTHING}"], [f"{NODE}/../node", EVERYTHING]):
        status, message = refused(unique("bad"), {"transport": "stdio", "command": command})
        assert status == 403 and "WONDER_MCP_STDIO_COMMANDS" in message, message
    # Another client's server is not there; nothing is listed for it.
    server_id = unique("mine")
    register(api, server_id, {"transport": "stdio", "command": [NODE, EVERYTHING]})
    with http_client(str(api.base_url), make_client(ray_cluster.store, "other")[1]) as other:
        assert other.get(f"/v1/mcp-servers/{server_id}").status_code == 404
        assert other.get("/v1/mcp-servers").json()["items"] == []
    assert api.delete(f"/v1/mcp-servers/{server_id}").status_code == 204
    assert api.get(f"/v1/mcp-servers/{server_id}").status_code == 404


# --------------------------------------------------------------------------- credentials


def put_secret(client: httpx.Client, name: str, value: str) -> None:
    response = client.put(f"/v1/secrets/{name}", json={"value": value})
    assert response.status_code == 200, response.text


def bearer(name: str) -> dict[str, Any]:
    return {"Authorization": {"secret": name, "prefix": "Bearer "}}


def test_a_secret_header_reaches_the_registered_server_and_nothing_else(
    api: httpx.Client, own_server: OwnServer
) -> None:
    name, value = unique("mcp-token"), unique("sk-mcp-value")
    put_secret(api, name, value)
    server_id = unique("creds")
    body = {"transport": "http", "url": own_server.url, "secret_headers": bearer(name)}
    registered = register(api, server_id, body)
    assert f"mcp.{server_id}.alpha" in registered["tool_ids"]
    assert registered["secret_headers"] == {"Authorization": {"secret": name, "prefix": "Bearer "}}

    # The server got the value on every request of the connection (and the platform's own
    # headers none of the caller's: no Wonder key).
    seen = own_server.seen()
    assert seen and all(r["headers"].get("authorization") == f"Bearer {value}" for r in seen)

    # A tool call through the agent loop goes over the same connection with the same header.
    script = [
        {"tool_calls": [{"name": "echo_back", "arguments": {"text": "over a credential"}}]},
        {"reply": "{{last_tool}}"},
    ]
    agent = agent_with_tools(api, [f"mcp.{server_id}.echo_back"], script)
    turn = run_turn(api, agent, "call it")
    assert turn["status"] == "completed", turn
    assert "over a credential" in results_by_tool(turn)["echo_back"]["result"]["content"]
    assert all(r["headers"].get("authorization") == f"Bearer {value}" for r in own_server.seen())

    # The value is nowhere the client (or anyone reading the API or the audit trail) can read.
    for path in (
        f"/v1/mcp-servers/{server_id}",
        "/v1/mcp-servers",
        f"/v1/tools/mcp.{server_id}.echo_back",
        f"/v1/audit?target=mcp_servers:{server_id}",
    ):
        response = api.get(path)
        assert response.status_code == 200, (path, response.text)
        assert value not in response.text, path
    audit = api.get("/v1/audit", params={"target": f"mcp_servers:{server_id}"}).json()["items"]
    assert [e["action"] for e in audit] == ["mcp_server.put"], audit
    assert audit[0]["details"]["secret_headers"] == {"Authorization": name}
    assert audit[0]["key_id"] is not None  # the request's key, through the request's Audit


def test_a_redirect_takes_no_secret_anywhere(api: httpx.Client) -> None:
    """A server that answers with a redirect (to another listed address) gets no connection
    followed there: the registration fails, the other listener sees nothing at all."""
    name, value = unique("mcp-token"), unique("sk-mcp-value")
    put_secret(api, name, value)
    with Listening() as elsewhere, Listening() as redirecting:
        url = f"{redirecting.url}/redirect?to={elsewhere.url}/mcp"
        server_id = unique("redirect")
        response = api.put(
            f"/v1/mcp-servers/{server_id}",
            json={"transport": "http", "url": url, "secret_headers": bearer(name)},
        )
        assert response.status_code >= 400, response.text
        assert value not in response.text
        assert redirecting.requests, "the registered server was asked"
        assert elsewhere.connections == 0 and elsewhere.requests == []
    # Not reachable as registered: not registered.
    assert api.get(f"/v1/mcp-servers/{server_id}").status_code == 404


def test_a_client_cannot_name_another_clients_secret(
    api: httpx.Client, ray_cluster: Cluster, own_server: OwnServer
) -> None:
    name = unique("shared-name")
    theirs = unique("sk-of-the-first-client")
    put_secret(api, name, theirs)
    with http_client(str(api.base_url), make_client(ray_cluster.store, "intruder")[1]) as other:
        other.timeout = httpx.Timeout(120)
        asked_before = len(own_server.seen())
        body = {"transport": "http", "url": own_server.url, "secret_headers": bearer(name)}
        refused = other.put(f"/v1/mcp-servers/{unique('steal')}", json=body)
        assert refused.status_code == 400, refused.text
        assert name in error_of(refused)["message"]
        assert len(own_server.seen()) == asked_before, "nothing connected for the refused one"
        # Names are names, not paths to another client's secrets.
        for crafted in ("../alice/token", "client:other/token", "*"):
            body = {"transport": "http", "url": own_server.url, "secret_headers": bearer(crafted)}
            assert other.put(f"/v1/mcp-servers/{unique('x')}", json=body).status_code == 422
        # With a secret of its own under the same name, its own value goes, never the other's.
        mine = unique("sk-of-the-intruder")
        put_secret(other, name, mine)
        register(other, unique("own"), {**body, "secret_headers": bearer(name)})
        sent = [r["headers"].get("authorization") for r in own_server.seen()[asked_before:]]
        assert sent and set(sent) == {f"Bearer {mine}"}, sent
        assert not any(theirs in str(r) for r in own_server.seen())


# --------------------------------------------------------------------------- hostile servers


def test_what_a_hostile_server_says_reaches_the_model_bounded(api: httpx.Client) -> None:
    """A server whose tool names collide with and imitate others, whose result is megabytes and
    whose answers are not MCP: the library keeps one tool per name (the first listed), a name
    too long is skipped, and each call ends as a tool result the model sees, bounded, with the
    turn completing."""
    server = start_test_server(hostile=True)
    try:
        server_id = unique("hostile")
        tool_ids = register(api, server_id, {"transport": "http", "url": server.url})["tool_ids"]
        names = {api.get(f"/v1/tools/{tool_id}").json()["name"]: tool_id for tool_id in tool_ids}
        assert names["echo_back"] == f"mcp.{server_id}.echo_back"  # not echo.back, listed later
        assert f"mcp.{server_id}.echo.back" not in tool_ids
        assert "______etc_passwd" in names and len(tool_ids) == len(names)
        assert all(len(name) <= 64 and "x" * 100 not in name for name in names)
        # A listing that is no MCP listing: refused, nothing registered.
        body = {"transport": "http", "url": server.url, "headers": {"X-Hostile-List": "1"}}
        refused = api.put(f"/v1/mcp-servers/{unique('no-listing')}", json=body)
        assert refused.status_code == 400 and "tools/list" in error_of(refused)["message"]

        script = [
            {"tool_calls": [{"name": "huge", "arguments": {}}]},
            {"tool_calls": [{"name": "malformed", "arguments": {}}]},
            {"tool_calls": [{"name": "garbled", "arguments": {}}]},
            {"reply": "survived"},
        ]
        agent = agent_with_tools(api, [names[n] for n in ("huge", "malformed", "garbled")], script)
        turn = run_turn(api, agent, "call them")
    finally:
        server.stop()
    assert turn["status"] == "completed", turn
    moves = [m for m in turn["moves"] if m.get("tool_call")]
    huge, malformed, garbled = (m["tool_result"] for m in moves)
    assert huge["success"] and 30_000 < len(huge["result"]["content"]) <= 32_000
    for failed in (malformed, garbled):
        assert failed["success"] is False and failed["error"]["code"] == "EXECUTION_FAILED"
        assert len(failed["error"]["message"]) <= 2100, failed


# --------------------------------------------------------------------------- tool-list changes


@pytest.mark.parametrize("legacy", [False, True], ids=["listen-stream", "initialize-era"])
def test_the_library_follows_the_servers_tool_list(api: httpx.Client, legacy: bool) -> None:
    """The server announces a changed tool list (a ``subscriptions/listen`` event on the current
    protocol, ``notifications/tools/list_changed`` on the initialize-era one): the library
    gets the new tool and the registration lists what the server now has."""
    server = start_test_server(legacy=legacy)
    try:
        server_id = unique("changing")
        registered = register(api, server_id, {"transport": "http", "url": server.url})
        assert f"mcp.{server_id}.alpha" in registered["tool_ids"]
        assert api.get(f"/v1/tools/mcp.{server_id}.beta").status_code == 404

        server.change()

        def followed() -> dict[str, Any] | None:
            now = api.get(f"/v1/mcp-servers/{server_id}").json()
            return now if f"mcp.{server_id}.beta" in now["tool_ids"] else None

        now = wait_for(followed, timeout=60, interval=0.5)
        assert f"mcp.{server_id}.alpha" not in now["tool_ids"]
        beta = api.get(f"/v1/tools/mcp.{server_id}.beta")
        assert beta.status_code == 200 and beta.json()["target_id"] == f"{server_id}/beta"
        # The new tool is called like any other through the agent loop.
        script = [{"tool_calls": [{"name": "beta", "arguments": {}}]}, {"reply": "{{last_tool}}"}]
        turn = run_turn(api, agent_with_tools(api, [f"mcp.{server_id}.beta"], script), "beta?")
        assert turn["status"] == "completed", turn
        assert "beta" in results_by_tool(turn)["beta"]["result"]["content"]
    finally:
        server.stop()

"""Wonder as an MCP server: the ``mcp`` Python SDK's client and the official MCP conformance suite
(npm ``@modelcontextprotocol/conformance``) against the gateway's ``/mcp`` over real HTTP, agents
answered by a scripted model."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.mcp_fixtures import CONFORMANCE, NODE, REPO
from tests.integration.test_gateway import deploy_gateway, http_client
from tests.integration.test_gateway_stream import scripted_agent

BEARER_FETCH = str(REPO / "tests/integration/bearer_fetch.mjs")
# The conformance suite's scenarios that apply to a server whose tools are its agents; the others
# need fixed fixture tools, prompts or resources (test_simple_text, test_image_content, ...), the
# deprecated logging capability, server-to-client requests (sampling, elicitation: none over
# stateless HTTP), or an unauthenticated localhost server (DNS rebinding). docs/protocols.md.
SCENARIOS = ["server-initialize", "ping", "tools-list", "resources-list"]


@pytest.fixture(scope="module")
def gateway_url(ray_cluster: Cluster, serve_port: int) -> str:
    return deploy_gateway(ray_cluster, serve_port)


@pytest.fixture
def key(ray_cluster: Cluster) -> str:
    return make_client(ray_cluster.store, "mcp-client")[1]


@pytest.fixture
def api(gateway_url: str, key: str) -> Iterator[httpx.Client]:
    with http_client(gateway_url, key) as client:
        client.timeout = httpx.Timeout(120)  # a first conversation's actor starts cold
        yield client


def mcp_client(gateway_url: str, key: str, query: str = "", user: str | None = None) -> Client:
    headers = {"Authorization": f"Bearer {key}"}
    if user is not None:
        headers["X-Wonder-User"] = user
    http = httpx2.AsyncClient(headers=headers, trust_env=False, timeout=120)
    return Client(streamable_http_client(f"{gateway_url}/mcp{query}", http_client=http))


async def test_mcp_client_calls_an_agent_with_progress(
    gateway_url: str, api: httpx.Client, key: str
) -> None:
    agent_id = scripted_agent(api, [{"reply": "the agent heard: {{last_user}}"}])
    other = scripted_agent(api, [{"reply": "other"}])
    progress: list[str] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async with mcp_client(gateway_url, key) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {agent_id, other} <= set(tools)
        assert tools[agent_id].input_schema["required"] == ["message"]
        result = await client.call_tool(
            agent_id, {"message": "hello over MCP"}, progress_callback=on_progress
        )
        assert not result.is_error, result
        assert result.content[0].text == "the agent heard: hello over MCP"  # type: ignore[union-attr]
        structured = result.structured_content or {}
        conversation_id = structured["conversation_id"]
        assert "".join(progress).strip() == "the agent heard: hello over MCP"
        # The conversation goes on; its messages are a resource.
        again = await client.call_tool(
            agent_id, {"message": "twice", "conversation_id": conversation_id}
        )
        assert (again.structured_content or {})["conversation_id"] == conversation_id
        uri = f"wonder://conversations/{conversation_id}"
        assert uri in {str(r.uri) for r in (await client.list_resources()).resources}
        read = await client.read_resource(uri)
        body = json.loads(read.contents[0].text)  # type: ignore[union-attr]
        assert [m["content"] for m in body["messages"]] == [
            "hello over MCP",
            "the agent heard: hello over MCP",
            "twice",
            "the agent heard: twice",
        ]
    # The same turns are REST turns.
    assert len(api.get(f"/v1/conversations/{conversation_id}/turns").json()["items"]) == 2
    # A chosen set of agents.
    async with mcp_client(gateway_url, key, f"?agents={other}") as chosen:
        assert [t.name for t in (await chosen.list_tools()).tools] == [other]
        refused = await chosen.call_tool(agent_id, {"message": "hi"})
        assert refused.is_error


async def test_mcp_access_rules(gateway_url: str, api: httpx.Client, ray_cluster: Cluster) -> None:
    agent_id = scripted_agent(api, [{"reply": "mine"}])
    conversation = api.post("/v1/conversations", json={"agent_id": agent_id}).json()["id"]
    with http_client(gateway_url, None) as anonymous:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        refused = anonymous.post("/mcp", json=body)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "UNAUTHORIZED"
    stranger = make_client(ray_cluster.store, "stranger")[1]
    async with mcp_client(gateway_url, stranger) as client:
        assert agent_id not in {t.name for t in (await client.list_tools()).tools}
        answer = await client.call_tool(agent_id, {"message": "hi"})
        assert answer.is_error and "NOT_FOUND" in answer.content[0].text  # type: ignore[union-attr]
        with pytest.raises(MCPError):
            await client.read_resource(f"wonder://conversations/{conversation}")
        assert (await client.list_resources()).resources == []
    # Inside the client, an acting user reaches only the conversations it is a member of.
    private = api.post(
        "/v1/conversations", json={"agent_id": agent_id}, headers={"X-Wonder-User": "owner-u"}
    ).json()["id"]
    key = str(api.headers["Authorization"]).removeprefix("Bearer ")
    async with mcp_client(gateway_url, key, user="someone-else") as client:
        with pytest.raises(MCPError):
            await client.read_resource(f"wonder://conversations/{private}")
        resources = {str(r.uri) for r in (await client.list_resources()).resources}
        assert f"wonder://conversations/{private}" not in resources
        answer = await client.call_tool(agent_id, {"message": "hi", "conversation_id": private})
        assert answer.is_error and "NOT_FOUND" in answer.content[0].text  # type: ignore[union-attr]
    async with mcp_client(gateway_url, key, user="owner-u") as client:
        read = await client.read_resource(f"wonder://conversations/{private}")
        assert json.loads(read.contents[0].text)["conversation"]["id"] == private  # type: ignore[union-attr]


def test_conformance_suite(gateway_url: str, api: httpx.Client, key: str, tmp_path: Path) -> None:
    scripted_agent(api, [{"reply": "conformant"}])  # a tool to list
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "WONDER_MCP_URL": f"{gateway_url}/mcp",
        "WONDER_MCP_KEY": key,
        "NO_PROXY": "*",
    }
    failures: dict[str, Any] = {}
    for scenario in SCENARIOS:
        out = tmp_path / scenario
        run = subprocess.run(
            [
                NODE,
                "--import",
                BEARER_FETCH,
                CONFORMANCE,
                "server",
                "--url",
                env["WONDER_MCP_URL"],
                "--scenario",
                scenario,
                "-o",
                str(out),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        checks = [json.loads(p.read_text()) for p in out.rglob("checks.json")]
        flat = [c for group in checks for c in (group if isinstance(group, list) else [group])]
        bad = [c for c in flat if c.get("status") == "FAILURE"]
        if run.returncode != 0 or bad or not flat:
            failures[scenario] = {"rc": run.returncode, "bad": bad, "out": run.stdout[-2000:]}
    assert failures == {}, failures

"""``wonder chat`` against the session's gateway: a scripted agent answers, tokens are printed."""

from __future__ import annotations

import io

import httpx

from cluster.cli.chat import TerminalChat
from tests.conftest import Cluster
from tests.factories import make_client
from tests.integration.test_gateway import deploy_gateway, http_client
from tests.integration.test_gateway_stream import scripted_agent


async def test_chat_streams_the_reply(ray_cluster: Cluster, serve_port: int) -> None:
    url = deploy_gateway(ray_cluster, serve_port)
    _, key = make_client(ray_cluster.store, "chatter")
    api: httpx.Client
    with http_client(url, key) as api:
        agent_id = scripted_agent(api, [{"reply": "you said {{last_user}}"}])
    lines = iter(["hello there", "second line", ""])
    out = io.StringIO()
    chat = TerminalChat(url, key, lambda: next(lines), out)
    assert await chat.run(agent_id) == 0
    text = out.getvalue()
    assert "agent> you said hello there\n" in text
    assert "agent> you said second line\n" in text
    assert chat.last_seq > 0


async def test_chat_with_unknown_agent_fails_plainly(ray_cluster: Cluster, serve_port: int) -> None:
    url = deploy_gateway(ray_cluster, serve_port)
    _, key = make_client(ray_cluster.store, "chatter")
    chat = TerminalChat(url, key, lambda: None, io.StringIO())
    assert await chat.run("agent_nope") == 3  # not found

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


async def test_chat_resumes_a_conversation_with_its_last_turns(
    ray_cluster: Cluster, serve_port: int
) -> None:
    url = deploy_gateway(ray_cluster, serve_port)
    _, key = make_client(ray_cluster.store, "chatter")
    with http_client(url, key) as api:
        agent_id = scripted_agent(api, [{"reply": "you said {{last_user}}"}])
    said = [f"message {n}" for n in range(7)]
    first_out = io.StringIO()
    first = TerminalChat(url, key, iter([*said, ""]).__next__, first_out)
    assert await first.run(agent_id) == 0
    conversation_id = first_out.getvalue().split()[1]  # "conversation <id> (...)"

    out = io.StringIO()
    resumed = TerminalChat(url, key, iter(["message 7", ""]).__next__, out)
    assert await resumed.run(None, conversation_id) == 0
    text = out.getvalue()
    shown = text.split(f"conversation {conversation_id}")[0].splitlines()
    # The last five turns, oldest first, each question and its answer.
    assert shown == [
        line for n in range(2, 7) for line in (f"you> message {n}", f"agent> you said message {n}")
    ]
    assert "agent> you said message 7\n" in text  # and the chat goes on in that conversation
    with http_client(url, key) as api:
        turns = api.get(f"/v1/conversations/{conversation_id}/turns").json()["items"]
    assert len(turns) == 8
    missing = TerminalChat(url, key, lambda: None, io.StringIO())
    assert await missing.run(None, "conv_nope") == 3  # not found

"""The web console in a real Chromium against a real gateway (tests/browser/conftest.py).

Every test checks each view it opens with axe-core (no serious or critical violation) and, at the
end, that the API key travelled in no URL and that the page reached no other host. With
``WONDER_CONSOLE_SCREENSHOTS=1`` the views' screenshots are written for docs/console.md.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from websockets.sync.client import connect

from core.ids import new_id
from tests.browser.console_page import Console
from tests.conftest import Cluster, wait_for
from tests.factories import make_agent, scripted_profile, task_tool
from tests.integration.test_gateway import http_client

pytestmark = pytest.mark.timeout(600)

NOTE_SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string"}, "value": {"type": "integer"}},
    "required": ["key", "value"],
    "additionalProperties": False,
}


def tool_agent(cluster: Cluster, client_id: str) -> str:
    """An agent whose scripted model calls ``note`` wrongly, then rightly, then answers."""
    note = task_tool(
        cluster.store,
        "note",
        [{"kind": "context.set", "params": {"key": "{{input.key}}", "value": "{{input.value}}"}}],
        schema=NOTE_SCHEMA,
    )
    profile = scripted_profile(
        cluster.store,
        [
            {"tool_calls": [{"name": "note", "arguments": {"key": "answer", "value": "lots"}}]},
            {"tool_calls": [{"name": "note", "arguments": {"key": "answer", "value": 42}}]},
            {"reply": "The answer is noted: {{last_tool}}"},
        ],
    )
    return make_agent(cluster.store, client_id, profile, [note]).id


def finished_turn(api: httpx.Client, conversation_id: str, content: str) -> str:
    """Post ``content`` over REST and wait for its turn to end; its id."""
    posted = api.post(f"/v1/conversations/{conversation_id}/messages", json={"content": content})
    assert posted.status_code == 202, posted.text
    turn_id = str(posted.json()["turn_id"])

    def ended() -> str:
        turn: dict[str, Any] = api.get(
            f"/v1/conversations/{conversation_id}/turns/{turn_id}"
        ).json()
        return str(turn["status"]) if turn["status"] in ("completed", "failed") else ""

    assert wait_for(ended, timeout=120, interval=0.2) == "completed"
    return turn_id


def test_chat_streams_tokens_and_resumes_from_its_seq_after_a_drop(
    console: Console, ray_cluster: Cluster, client_key: tuple[str, str]
) -> None:
    agent = tool_agent(ray_cluster, client_key[0])
    page = console.page
    console.open("#/conversations")
    page.locator("select[name=new-agent]").select_option(agent)
    page.get_by_label("Title").fill("Noting things")
    page.get_by_role("button", name="New conversation").click()
    expect(page.locator("main h1")).to_have_text("Noting things")
    expect(page.locator("#stream-state")).to_contain_text("Live from seq 1")

    page.get_by_label("Message", exact=True).fill("remember the answer")
    page.keyboard.press("Enter")  # Enter sends
    log = page.locator("#chat-log")
    expect(log.locator(".line.user")).to_contain_text("remember the answer")
    expect(log.locator(".line.agent")).to_contain_text("The answer is noted")
    expect(log.locator(".line.meta", has_text="tool call note").first).to_be_visible()
    assert int(log.get_attribute("data-tokens") or 0) > 0  # the reply arrived as token deltas
    expect(page.locator("#threads a")).to_have_text(["remember the answer"])  # the tree follows
    console.screenshot("chat")

    # The connection drops (as a network would drop it): the stream reopens with a new ticket
    # from the last seq it saw, and says so; what happens meanwhile is not lost.
    seq_before = int(page.locator("#last-seq").inner_text())
    page.evaluate("() => wonderConsole.stream.drop()")
    expect(log.locator(".reconnect")).to_have_text(
        f"Reconnected: resumed from seq {seq_before}, nothing missed."
    )
    page.get_by_label("Message", exact=True).fill("and again")
    page.get_by_role("button", name="Send").click()
    expect(log.locator(".line.agent")).to_have_count(2)
    assert int(page.locator("#last-seq").inner_text()) > seq_before

    # Each stream opened with a one-use ticket, never the key; a ticket replayed is refused.
    assert len(console.sockets) == 2
    assert all("ticket=wst_" in url and "api_key" not in url for url in console.sockets)
    with connect(console.sockets[0], open_timeout=30) as replayed:
        frame = replayed.recv(timeout=30)
        assert '"code":"UNAUTHORIZED"' in str(frame).replace(" ", "")


def test_conversations_tree_turn_inspector_and_fork(
    console: Console, ray_cluster: Cluster, client_key: tuple[str, str], gateway_url: str
) -> None:
    client_id, key = client_key
    agent = tool_agent(ray_cluster, client_id)
    with http_client(gateway_url, key) as api:
        conv = api.post("/v1/conversations", json={"agent_id": agent, "title": "Inspected"}).json()
        api.post("/v1/conversations", json={"agent_id": agent, "title": "Another"})
        turn = finished_turn(api, conv["id"], "remember the answer")
        second = finished_turn(api, conv["id"], "what was it?")
        label = f"console-{new_id().lower()}"
        made = api.put(f"/v1/sessions/{label}", json={"conversation_id": conv["id"]})
        assert made.status_code == 201, made.text
    page = console.page

    console.open("#/conversations")
    rows = page.locator("#conversation-list tbody tr")
    expect(rows).to_have_count(2)
    page.get_by_label("Status").select_option("completed")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#conversation-list .empty")).to_be_visible()  # both are active
    page.get_by_label("Status").select_option("")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(2)
    sessions = page.locator("section[aria-labelledby=sessions-h] tbody tr")
    expect(sessions).to_have_count(1)
    expect(sessions).to_contain_text(label)
    expect(sessions.get_by_role("link", name=second)).to_be_visible()  # the session's head
    console.screenshot("conversations")

    page.get_by_role("link", name="Inspected").click()
    # The threads: the second turn replies to the first.
    expect(page.locator("#threads a")).to_have_text(["remember the answer", "what was it?"])
    expect(page.locator("#threads li li a")).to_have_text(["what was it?"])
    page.locator("#threads a", has_text="remember the answer").click()
    expect(page.locator("main h1")).to_have_text(f"Turn {turn}")
    moves = page.locator(".move")
    expect(moves).to_have_count(3)
    # The wrong call: its arguments and the validation error; the right one: its result; then
    # the answer.
    expect(moves.nth(0).locator("pre.json").first).to_contain_text('"value": "lots"')
    expect(moves.nth(0).locator(".error")).to_contain_text("INVALID_INPUT")
    expect(moves.nth(1).locator("pre.json").first).to_contain_text('"value": 42')
    expect(moves.nth(1)).to_contain_text("Result")
    expect(moves.nth(2)).to_contain_text("The answer is noted")
    # Recorded model calls: listed when the gateway records them, a plain statement when not.
    calls = page.locator("#model-calls")
    expect(calls.locator(".model-call, #no-calls").first).to_be_visible()
    if calls.locator(".model-call").count():
        expect(calls.locator(".model-call").first).to_contain_text("scripted")
    console.screenshot("turn")

    page.get_by_role("button", name="Fork at this turn").click()
    expect(page.locator("main")).to_contain_text(f"Forked from {conv['id']} at turn {turn}")
    expect(page.locator("#chat-log .line.agent")).to_contain_text("The answer is noted")

    # Re-run the second turn's message, edited, on a new branch: the fork streams its answer.
    console.go(f"#/conversations/{conv['id']}/turns/{second}")
    page.get_by_label("Re-run this turn's message").fill("what was it, once more?")
    page.get_by_role("button", name="Fork and re-run").click()
    expect(page.locator("main")).to_contain_text(f"Forked from {conv['id']} at turn {turn}")
    expect(page.locator("#chat-log .line.user").last).to_contain_text("what was it, once more?")
    expect(page.locator("#chat-log .line.agent")).to_have_count(2)
    rerun_fork = page.url.rsplit("#/conversations/", 1)[1]
    console.go(f"#/conversations/{conv['id']}")
    expect(page.locator(".tree ul a")).to_have_count(2)  # both forks
    expect(page.locator(f".tree ul a[href='#/conversations/{rerun_fork}']")).to_be_visible()
    console.screenshot("conversation")


def test_library_versions_diff_and_inline_errors_then_a_workflow_run(
    console: Console, client_key: tuple[str, str], gateway_url: str
) -> None:
    suffix = new_id().lower()
    persona, task, workflow = f"helper-{suffix}", f"echo-{suffix}", f"shout-{suffix}"
    with http_client(gateway_url, client_key[1]) as api:
        base = {"system_prompt": "You are helpful.", "model_profile_id": "local"}
        assert api.put(f"/v1/personas/{persona}", json=base).status_code == 200
        changed = {**base, "system_prompt": "You are terse."}
        assert api.put(f"/v1/personas/{persona}", json=changed).status_code == 200
        echo = {
            "actions": [{"kind": "python", "params": {"callable": "library.workflows.steps:echo"}}]
        }
        assert api.put(f"/v1/tasks/{task}", json=echo).status_code == 200
        flow = {
            "nodes": [
                {"id": "split", "kind": "pass"},
                {
                    "id": "say",
                    "kind": "task",
                    "target_id": task,
                    "input_mapping": {"word": "{{item}}!"},
                },
                {
                    "id": "join",
                    "kind": "pass",
                    "join": {"mode": "all"},
                    "input_mapping": {"said": "branches"},
                },
            ],
            "edges": [
                {"from": "split", "to": "say", "foreach": "input.words"},
                {"from": "say", "to": "join"},
            ],
            "output_mapping": {"said": "nodes.join.said"},
        }
        assert api.put(f"/v1/workflows/{workflow}", json=flow).status_code == 200
    page = console.page

    console.open("#/library/personas")
    page.get_by_role("link", name=persona).click()
    expect(page.locator("main h1")).to_have_text(persona)
    expect(page.locator("#diff-out .del")).to_contain_text("You are helpful.")
    expect(page.locator("#diff-out .add")).to_contain_text("You are terse.")
    console.screenshot("library")
    page.get_by_label("Fields as JSON").fill('{"system_prompt": 3, "model_profile_id": "local"}')
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#editor-errors")).to_contain_text("system_prompt")

    console.go("#/workflows")
    page.get_by_label("Workflow", exact=True).select_option(workflow)
    page.get_by_label("Input (JSON)").fill('{"words": ["a", "b", "c"]}')
    page.get_by_role("button", name="Run").click()
    # The run's executor tasks may start cold on a loaded machine: give them time.
    expect(page.locator("#run-status")).to_have_text("completed", timeout=240_000)
    expect(page.locator(".node[data-node='say'] .badge")).to_have_text(["done", "done", "done"])
    # The graph: three nodes, the fan-out's edge marked, each node's state in the run.
    drawn = page.locator("#run-graph svg")
    expect(drawn.locator("g.wf-node")).to_have_count(3)
    expect(drawn.locator(".wf-edge")).to_have_count(2)
    expect(drawn.locator(".wf-edge-label")).to_have_text(["each"])
    expect(drawn.locator("g[data-node='say']")).to_have_class(re.compile(r"\bwf-done\b"))
    expect(drawn).to_have_attribute("aria-label", re.compile(r"say: done \u00d73"))
    expect(page.locator("main")).to_contain_text('"word": "c!"')
    console.screenshot("workflow-run")
    console.go("#/workflows")
    expect(page.locator("main table")).to_contain_text(workflow)
    console.screenshot("workflows")


def test_memories_browse_and_search_with_ranking(
    console: Console, client_key: tuple[str, str], gateway_url: str, embedder_app: str
) -> None:
    with http_client(gateway_url, client_key[1]) as api:
        made = api.post(
            "/v1/agents",
            json={
                "name": "rememberer",
                "persona": {"id": "inline", "system_prompt": "Hi.", "model_profile_id": "local"},
            },
        )
        agent = made.json()["id"]
        for content, kind in [
            ("The user works on the payments team", "fact"),
            ("The user prefers short answers", "preference"),
            ("Lunch on Friday with Sam", "episode"),
        ]:
            stored = api.post(
                f"/v1/agents/{agent}/memories", json={"type": kind, "content": content}
            )
            assert stored.status_code == 201, stored.text
    page = console.page

    console.open("#/memories")
    expect(page.locator("#memory-list tbody tr")).to_have_count(3)
    page.get_by_label("Types").fill("fact")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#memory-list tbody tr")).to_have_count(1)
    page.get_by_label("Types").fill("")
    page.get_by_label("Query").fill("which team is the user on")
    page.get_by_label("Mode").select_option("hybrid")
    page.get_by_role("button", name="Search").click()
    hits = page.locator("#memory-hits tbody tr")
    expect(hits.first).to_contain_text("payments team")  # the best match, ranked first
    expect(page.locator("#memory-hits thead")).to_contain_text("Relevance")
    console.screenshot("memories")

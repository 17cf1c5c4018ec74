"""The console's branch views in a real Chromium against a real gateway: a fork compared with its
original turn by turn, a model call's context window, and a recorded call replayed with another
model profile (the playground). Each view is checked with axe-core; with
``WONDER_CONSOLE_SCREENSHOTS=1`` its screenshot is written for docs/console.md.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.console_page import Console
from tests.browser.test_console import NOTE_SCHEMA, finished_turn
from tests.conftest import Cluster, wait_for
from tests.factories import make_agent, scripted_profile, task_tool
from tests.integration.test_gateway import http_client

pytestmark = pytest.mark.timeout(600)


def rule_agent(cluster: Cluster, client_id: str) -> str:
    """An agent whose scripted model notes ``a`` for "sunny", ``b`` for "rainy", then answers
    with the user's words."""
    note = task_tool(
        cluster.store,
        "note",
        [{"kind": "context.set", "params": {"key": "{{input.key}}", "value": "{{input.value}}"}}],
        schema=NOTE_SCHEMA,
    )
    profile = scripted_profile(
        cluster.store,
        [
            {
                "match": "sunny",
                "tool_calls": [{"name": "note", "arguments": {"key": "a", "value": 1}}],
            },
            {
                "match": "rainy",
                "tool_calls": [{"name": "note", "arguments": {"key": "b", "value": 2}}],
            },
            {"match": "", "reply": "Noted: {{last_user}}"},
        ],
    )
    return make_agent(cluster.store, client_id, profile, [note]).id


def test_fork_rerun_then_compare_with_the_original_turn_by_turn(
    console: Console, ray_cluster: Cluster, client_key: tuple[str, str], gateway_url: str
) -> None:
    client_id, key = client_key
    agent = rule_agent(ray_cluster, client_id)
    with http_client(gateway_url, key) as api:
        conv = api.post("/v1/conversations", json={"agent_id": agent, "title": "Weather"}).json()
        first = finished_turn(api, conv["id"], "hello")
        second = finished_turn(api, conv["id"], "remember sunny")
    page = console.page

    # Fork and re-run the second turn with an edited message; the fork streams its answer.
    console.open(f"#/conversations/{conv['id']}/turns/{second}")
    page.get_by_label("Re-run this turn's message").fill("remember rainy")
    page.get_by_role("button", name="Fork and re-run").click()
    expect(page.locator("main")).to_contain_text(f"Forked from {conv['id']} at turn {first}")
    expect(page.locator("#chat-log .line.agent").last).to_contain_text("Noted: remember rainy")
    fork = page.url.rsplit("#/conversations/", 1)[1]

    page.get_by_role("link", name="Compare with the original, turn by turn").click()
    expect(page.locator("main h1")).to_contain_text("with its original")
    expect(page.locator("section[aria-labelledby=shared-h] li")).to_have_text(["hello"])
    rows = page.locator("#alignment > li")
    expect(rows).to_have_count(1)
    row = rows.first
    expect(row.locator("h3 .badge")).to_have_text("differs")
    sides = row.locator(".side")
    expect(sides.nth(0)).to_contain_text("remember sunny")
    expect(sides.nth(1)).to_contain_text("remember rainy")
    expect(sides.nth(1).get_by_role("link", name="fork: turn")).to_have_attribute(
        "href", re.compile(f"^#/conversations/{fork}/turns/turn_")
    )
    # The diff: the message's changed word, the reply's, and the tool calls' arguments.
    message = row.get_by_label("Message, turn 1: original to fork")
    expect(message.locator("del")).to_have_text(["sunny"])
    expect(message.locator("ins")).to_have_text(["rainy"])
    expect(row.get_by_label("Reply, turn 1: original to fork").locator("ins")).to_contain_text(
        ["rainy"]
    )
    calls = row.get_by_label("Tool calls, turn 1: original to fork")
    expect(calls.locator("del")).to_contain_text('note {"key":"a","value":1}')
    expect(calls.locator("ins")).to_contain_text('note {"key":"b","value":2}')
    expect(page.locator("#no-workspace")).to_be_visible()  # no project: said, not hidden
    console.screenshot("compare")


def test_a_calls_context_window_and_its_replay_with_another_profile(
    console: Console, ray_cluster: Cluster, client_key: tuple[str, str], gateway_url: str
) -> None:
    client_id, key = client_key
    agent = rule_agent(ray_cluster, client_id)
    echo = scripted_profile(ray_cluster.store)  # answers "echo: <the last user message>"
    with http_client(gateway_url, key) as api:
        conv = api.post("/v1/conversations", json={"agent_id": agent, "title": "Playground"}).json()
        turn = finished_turn(api, conv["id"], "remember sunny")
        path = f"/v1/conversations/{conv['id']}/turns/{turn}/calls"
        # Records are written by the actor's background writer: the tool call, then the answer.
        calls = wait_for(lambda: [c for c in [api.get(path).json()["items"]] if len(c) == 2])[0]
    page = console.page

    console.open(f"#/conversations/{conv['id']}/turns/{turn}")
    first = page.locator(".model-call").first
    first.get_by_role("button", name="Context window of call 1").click()
    table = first.locator("table.cw-table")
    expect(table.locator("tbody tr")).to_have_count(5)
    expect(table.locator("tr[data-section=history] td").first).to_have_text("1")
    expect(table.locator("tr[data-section=tool_specs] td").first).to_have_text("1")
    expect(table.locator("tr[data-section=system_prompt] .tokens")).not_to_have_text("0")
    expect(first.locator(".context-window .hint")).to_contain_text("estimated")
    expect(first.locator(".context-window .hint")).to_contain_text(
        f"The model counted {calls[0]['usage']['prompt_tokens']} prompt tokens"
    )
    console.screenshot("context-window")

    # The playground: the same request to the echo profile, its answer beside the recorded one.
    first.get_by_label("Replay call 1 with the model profile").select_option(echo.id)
    first.get_by_role("button", name="Replay").click()
    pair = first.locator(".replay-pair .side")
    expect(pair).to_have_count(2)
    expect(pair.nth(0)).to_contain_text('"name": "note"')  # the recorded call chose the tool
    expect(pair.nth(1)).to_contain_text("echo: remember sunny")
    expect(pair.nth(1).locator("h5")).to_contain_text(echo.id)
    expect(first.get_by_label("Text: recorded to replay, call 1").locator("ins")).to_contain_text(
        ["echo: "]
    )
    console.screenshot("playground")
    # Nothing was written to the conversation: still its one turn, its two calls.
    with http_client(gateway_url, key) as api:
        turns = api.get(f"/v1/conversations/{conv['id']}/turns").json()["items"]
        again = api.get(f"/v1/conversations/{conv['id']}/turns/{turn}/calls").json()["items"]
    assert [t["id"] for t in turns] == [turn]
    assert [c["id"] for c in again] == [c["id"] for c in calls]

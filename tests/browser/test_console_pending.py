"""The work a turn has out, shown in the live chat (a real Chromium against a real gateway,
tests/browser/conftest.py): an async tool running in the background and an async delegation to
another agent appear under their turn's message while they run (what, since when), the delegation
links to its child conversation while the child works, and each is marked failed or done when it
ends. The work is held open by the test (``tests.callables:wait_for_file``), so each state is
seen for as long as the test needs, never raced. axe-core checks the views (no serious or critical
violation); ``WONDER_CONSOLE_SCREENSHOTS=1`` pictures the chat for docs/console.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.console_page import Console
from tests.conftest import Cluster
from tests.factories import agent_tool, make_agent, make_conversation, scripted_profile, task_tool

pytestmark = pytest.mark.timeout(600)

WAIT = [{"kind": "python", "params": {"callable": "tests.callables:wait_for_file"}}]
PATH_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
LONG = {"max_attempts": 1, "timeout_ms": 300_000}  # the test holds the work open for a while


def rules(*pairs: tuple[str, Any]) -> list[dict[str, Any]]:
    """A scripted model answering by its last message: the first rule whose ``match`` is in it
    (a string replies, a dict calls that tool)."""
    return [
        {"match": match, "reply": then}
        if isinstance(then, str)
        else {"match": match, "tool_calls": [then]}
        for match, then in pairs
    ]


def test_work_out_shows_under_its_turn_until_it_ends(
    console: Console, ray_cluster: Cluster, client_key: tuple[str, str], tmp_path: Path
) -> None:
    store, client_id = ray_cluster.store, client_key[0]
    report_file, expert_file = tmp_path / "report", tmp_path / "expert"
    slow_report = task_tool(store, "slow_report", WAIT, PATH_SCHEMA, retry=LONG, **{"async": True})
    look_up = task_tool(store, "look_up", WAIT, PATH_SCHEMA, retry=LONG)
    expert_script = rules(
        ("expert-please", {"name": "look_up", "arguments": {"path": str(expert_file)}}),
        ("", "The expert found it."),
    )
    expert = make_agent(store, client_id, scripted_profile(store, expert_script), [look_up])
    ask = agent_tool(
        store,
        "ask_expert",
        expert.id,
        "Ask the expert; the answer comes later",
        invocation_mode="delegate",
        retry=LONG,
        **{"async": True},
    )
    host_script = rules(
        ("[background result]", "Background work ended: {{last_user}}"),
        ("start the report", {"name": "slow_report", "arguments": {"path": str(report_file)}}),
        ("ask the expert", {"name": "ask_expert", "arguments": {"input": "expert-please"}}),
        ("", "On it."),
    )
    host = make_agent(store, client_id, scripted_profile(store, host_script), [slow_report, ask])
    conv = make_conversation(store, client_id, host).id
    page = console.page
    console.open(f"#/conversations/{conv}")
    expect(page.locator("#stream-state")).to_contain_text("Live")
    log = page.locator("#chat-log")

    # An async tool: pending under the turn's message, then failed, with the error.
    page.get_by_label("Message", exact=True).fill("please start the report")
    page.keyboard.press("Enter")
    report = log.locator(".line.user + ul.turn-work li.work-item[data-kind=operation]")
    expect(report).to_have_attribute("data-status", "pending")
    expect(report).to_contain_text("slow_report, running in the background")
    expect(report).to_contain_text("since ")
    expect(log.locator(".line.agent", has_text="On it.")).to_be_visible()
    expect(report).to_have_attribute("data-status", "pending")  # still out after the answer
    report_file.write_text("fail")
    expect(report).to_have_attribute("data-status", "failed")
    expect(report.locator(".detail")).to_contain_text("the test said: fail")
    expect(log.locator(".line.agent", has_text="Background work ended")).to_be_visible()

    # An async delegation: pending, linked to the child conversation while the expert works.
    page.get_by_label("Message", exact=True).fill("please ask the expert")
    page.keyboard.press("Enter")
    delegation = log.locator("li.work-item[data-kind=delegation]")
    expect(delegation).to_have_attribute("data-status", "pending")
    expect(delegation).to_contain_text(
        f"ask_expert: a delegation to {expert.id} (in the background)"
    )
    child_link = delegation.locator("a.child-link")
    expect(child_link).to_be_visible()
    expect(delegation).to_have_attribute("data-status", "pending")  # found while it runs
    [child] = store.conversations.list(client_id, parent_id=conv)
    assert child.agent_id == expert.id
    expect(child_link).to_have_attribute("href", f"#/conversations/{child.id}")
    expect(log.locator("ul.turn-work")).to_have_count(2)  # one list per turn, each its own
    console.screenshot("chat-pending")

    expert_file.write_text("go")
    expect(delegation).to_have_attribute("data-status", "done")
    expect(delegation.locator(".hint")).to_contain_text(" to ")  # since … to … (its end)
    expect(log.locator(".line.agent", has_text="The expert found it.")).to_be_visible()

    # Opened later, the page shows the same, from the conversation's recent events.
    console.go("#/conversations")
    console.go(f"#/conversations/{conv}")
    items = page.locator("#chat-log li.work-item")
    expect(items).to_have_count(2)
    expect(items.nth(0)).to_have_attribute("data-status", "failed")
    expect(items.nth(1)).to_have_attribute("data-status", "done")

    # The link opens the child conversation, where the expert's turn ran.
    items.nth(1).locator("a.child-link").click()
    expect(page.locator("main")).to_have_attribute("data-route", f"#/conversations/{child.id}")
    expect(page.locator("main")).to_contain_text("(a delegation)")
    expect(page.locator("#chat-log .line.agent", has_text="The expert found it.")).to_be_visible()
    console.accessible("child conversation")

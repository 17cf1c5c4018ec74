"""Approving a tool call in the web console, in a real Chromium against a real gateway
(tests/browser/conftest.py): the chat shows the call waiting, with its tool and arguments; the
turn inspector shows it too, and its arguments are edited there and approved with the keyboard;
the call runs with the edited arguments and the answer reaches the chat. axe-core checks both
views (no serious or critical violation); ``WONDER_CONSOLE_SCREENSHOTS=1`` pictures them for
docs/console.md.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from core.domain import ApprovalPolicy
from tests.browser.console_page import Console
from tests.conftest import Cluster
from tests.factories import make_agent, make_conversation, scripted_profile, task_tool

pytestmark = pytest.mark.timeout(600)

SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "subject": {"type": "string", "maxLength": 80}},
    "required": ["to", "subject"],
    "additionalProperties": False,
}
SCRIPT = [
    {
        "match": "invoice",
        "tool_calls": [
            {"name": "send_email", "arguments": {"to": "ana@example.com", "subject": "Invoice"}}
        ],
    },
    {"match": "subject", "reply": "Sent: {{last_tool}}"},
]


def test_a_tool_call_is_approved_from_the_console(
    console: Console, ray_cluster: Cluster, client_key: tuple[str, str]
) -> None:
    store = ray_cluster.store
    echo = [{"kind": "python", "params": {"callable": "library.callables:echo"}}]
    tool = task_tool(store, "send_email", echo, SCHEMA, approval=ApprovalPolicy(timeout_s=3600))
    agent = make_agent(store, client_key[0], scripted_profile(store, SCRIPT), [tool])
    conv = make_conversation(store, client_key[0], agent).id
    page = console.page
    console.open(f"#/conversations/{conv}")
    expect(page.locator("#stream-state")).to_contain_text("Live")

    page.get_by_label("Message", exact=True).fill("send the invoice")
    page.keyboard.press("Enter")
    log = page.locator("#chat-log")
    expect(log.locator(".line.meta", has_text="send_email waits for approval")).to_be_visible()
    card = page.locator("#approvals article.approval")
    expect(card).to_have_count(1)
    expect(card.locator("h3")).to_have_text("send_email waits for approval")
    expect(card).to_contain_text("then it is denied")
    args = card.get_by_label("Arguments of send_email", exact=False)
    expect(args).to_have_value('{\n  "to": "ana@example.com",\n  "subject": "Invoice"\n}')
    console.screenshot("approvals")

    # The turn inspector shows the waiting call too: edit its arguments there, and approve
    # with the keyboard alone.
    card.get_by_role("link").click()
    expect(page.locator("main h1")).to_contain_text("Turn ")
    expect(page.locator(".facts")).to_contain_text("waits for a person's approval")
    card = page.locator("#approvals article.approval")
    expect(card).to_have_count(1)
    args = card.get_by_label("Arguments of send_email", exact=False)
    args.fill('{"to": "ana@example.com", "subject": "Invoice 2026-01"}')
    console.accessible("turn (approval)")
    edit = card.get_by_role("button", name="Edit & approve")
    edit.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#approvals .empty")).to_have_text("No tool call waits for approval.")

    page.locator(".crumbs a").click()
    expect(page.locator("#chat-log .line.agent")).to_contain_text(
        'Sent: {"to": "ana@example.com", "subject": "Invoice 2026-01"}'
    )
    expect(page.locator("#approvals .empty")).to_be_visible()

"""The console's access views in a real Chromium against a real gateway: the client's API keys
(create one and see its secret once, revoke it; the secret in no URL) and a conversation's
members (grant, see, revoke)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.console_page import Console
from tests.browser.test_console import tool_agent
from tests.conftest import Cluster
from tests.integration.test_gateway import http_client

pytestmark = pytest.mark.timeout(600)


def test_keys_and_members(
    console: Console, ray_cluster: Cluster, client_key: tuple[str, str], gateway_url: str
) -> None:
    client_id, key = client_key
    agent = tool_agent(ray_cluster, client_id)
    with http_client(gateway_url, key) as api:
        conv = api.post("/v1/conversations", json={"agent_id": agent, "title": "Shared"}).json()
    page = console.page

    console.open("#/keys")
    page.get_by_label("Name").fill("ci deploys")
    page.get_by_role("button", name="Create key").click()
    secret = page.get_by_label("The new key's secret")
    expect(secret).to_have_value(re.compile(r"^wk_"))
    made = secret.input_value()
    row = page.locator("#key-list tbody tr", has_text="ci deploys")
    expect(row).to_contain_text("active")
    console.screenshot("keys")
    with http_client(gateway_url, made) as new_client:  # the secret shown works
        assert new_client.get("/v1/agents").status_code == 200
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke key ci deploys").click()
    expect(row).to_contain_text("revoked")
    with http_client(gateway_url, made) as new_client:
        assert new_client.get("/v1/agents").status_code == 401
    assert all(made not in url for url in console.requested)

    console.go(f"#/conversations/{conv['id']}")
    page.get_by_role("link", name="Members").click()
    expect(page.locator("main h1")).to_have_text(f"Members of {conv['id']}")
    page.get_by_label("User").fill("maya")
    page.get_by_label("Level").select_option("writer")
    page.get_by_role("button", name="Grant").click()
    rows = page.locator("#member-list tbody tr")
    expect(rows.filter(has_text="maya")).to_contain_text("writer")
    console.screenshot("members")
    with http_client(gateway_url, key) as api:
        levels = {
            m["user_id"]: m["level"]
            for m in api.get(f"/v1/conversations/{conv['id']}/members").json()["items"]
        }
    assert levels == {"maya": "writer"}
    page.get_by_role("button", name="Revoke maya").click()
    expect(page.locator("#member-list")).not_to_contain_text("maya")

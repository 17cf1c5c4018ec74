"""The operations view in a real Chromium against a real gateway: the conversation directory's
resident actors against the cap with links into the Ray dashboard, the Serve deployments, the
models' throughput, the key's quota and the audit trail (an operator key)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from core.ids import utc_now
from tests.browser.console_page import Console
from tests.browser.test_console import finished_turn, tool_agent
from tests.conftest import Cluster
from tests.integration.test_gateway import http_client

pytestmark = pytest.mark.timeout(600)


def test_operations_show_resident_actors_deployments_throughput_and_audit(
    console: Console, ray_cluster: Cluster, client_key: tuple[str, str], gateway_url: str
) -> None:
    client_id, key = client_key
    agent = tool_agent(ray_cluster, client_id)
    with http_client(gateway_url, key) as api:
        conv = api.post("/v1/conversations", json={"agent_id": agent, "title": "Busy"}).json()
        finished_turn(api, conv["id"], "remember the answer")
        assert api.get("/v1/operations").status_code == 403  # not yet an operator's key
        ray_cluster.store.admin_keys.add(key, utc_now())
        persona = {"system_prompt": "Audited.", "model_profile_id": "local"}
        assert api.put(f"/v1/personas/audited-{client_id[-8:].lower()}", json=persona).is_success
    page = console.page

    console.open("#/operations")
    expect(page.locator("#residency-line")).to_contain_text("resident of")
    # The conversation just used is resident; its actor links into the Ray dashboard.
    row = page.locator("section[aria-labelledby=residency-h] tbody tr", has_text=conv["id"])
    expect(row).to_contain_text(f"conversation:{conv['id']}")
    link = row.get_by_role("link", name=f"conversation:{conv['id']} in the Ray dashboard")
    dashboard = re.compile(r"^http://127\.0\.0\.1:\d+/#/actors/[0-9a-f]{16,}$")
    expect(link).to_have_attribute("href", dashboard)
    expect(page.locator("section[aria-labelledby=models-h] table")).to_contain_text("gateway")
    expect(page.locator("#throughput")).not_to_contain_text(": 0 model calls")
    expect(page.locator("#audit-list")).to_contain_text("library.put")
    console.screenshot("operations")

    page.get_by_label("Action (one, or a family ending in a dot)").fill("key.")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#audit-list")).not_to_contain_text("library.put")

"""Correcting what an agent holds from the console, in a real Chromium against a real gateway:
editing a memory (found afterwards by its new text) and re-running a workflow from a node."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.console_page import Console
from tests.integration.test_gateway import http_client
from tests.integration.test_workflow_reruns import (
    START_TIMEOUT,
    counting_chain,
    ended,
    runs_of,
)

pytestmark = pytest.mark.timeout(600)


def test_edit_a_memory_then_find_it_by_its_new_text(
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
        ids = {}
        for content in ("The user's dog is called Rex", "The user prefers short answers"):
            stored = api.post(
                f"/v1/agents/{agent}/memories", json={"type": "fact", "content": content}
            )
            assert stored.status_code == 201, stored.text
            ids[content] = stored.json()["memory"]["id"]
    page = console.page
    memory_id = ids["The user's dog is called Rex"]

    console.open("#/memories")
    expect(page.locator("#memory-list tbody tr")).to_have_count(2)
    # Keyboard only: focus the row's Edit button, open the form, type, save.
    edit = page.locator("#memory-list").get_by_role("button", name=f"Edit memory {memory_id}")
    edit.focus()
    page.keyboard.press("Enter")
    form = page.locator("#memory-edit")
    expect(form).to_be_visible()
    expect(form.get_by_label("Content")).to_be_focused()
    expect(form.get_by_label("Content")).to_have_value("The user's dog is called Rex")
    page.keyboard.press("Control+A")
    page.keyboard.type("The user's parrot is called Kiwi")
    form.get_by_label("Significance (0 to 1)").fill("0.9")
    console.screenshot("memory-edit")
    form.get_by_role("button", name="Save memory").click()
    expect(page.locator("#memory-edit")).to_be_hidden()
    expect(page.locator("#memory-list")).to_contain_text("The user's parrot is called Kiwi")
    expect(page.locator("#memory-list")).not_to_contain_text("Rex")

    page.get_by_label("Query").fill("parrot named Kiwi")
    page.get_by_role("button", name="Search").click()
    best = page.locator("#memory-hits tbody tr").first
    expect(best).to_contain_text("The user's parrot is called Kiwi")
    expect(best).to_contain_text("0.90")
    with http_client(gateway_url, client_key[1]) as api:
        stored = api.get(f"/v1/agents/{agent}/memories/{memory_id}").json()
    assert stored["content"] == "The user's parrot is called Kiwi"
    assert stored["metadata"]["history"][0]["content"] == "The user's dog is called Rex"


def test_rerun_a_finished_workflow_run_from_a_middle_node(
    console: Console, client_key: tuple[str, str], gateway_url: str, tmp_path: Path
) -> None:
    with http_client(gateway_url, client_key[1]) as api:
        api.timeout = START_TIMEOUT
        workflow_id = counting_chain(api)
        started = ended(
            api,
            api.post(
                f"/v1/workflows/{workflow_id}/runs",
                json={"input": {"dir": str(tmp_path), "n": 0}},
            ),
        )
    assert started["run"]["status"] == "completed"
    original = started["run"]["id"]
    page = console.page

    console.open(f"#/workflows/runs/{original}")
    expect(page.locator("#run-status")).to_contain_text("completed")
    rerun = page.get_by_role("button", name="Re-run from here: b")
    rerun.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#rerun-input")).to_be_focused()
    expect(page.locator("#rerun")).to_contain_text("b and every node it leads to run again")
    console.screenshot("workflow-rerun-form")
    page.get_by_role("button", name="Start the re-run").click()

    main = page.locator("main")
    expect(main).to_have_attribute("data-route", re.compile(r"^#/workflows/runs/run_"))
    expect(main).not_to_have_attribute("data-route", f"#/workflows/runs/{original}")
    expect(page.locator("#run-status")).to_contain_text("completed", timeout=60_000)
    expect(page.locator("#rerun-of")).to_contain_text(f"{original} from node b")
    drawn = page.locator("#run-graph svg")
    expect(drawn.locator("g[data-node='a']")).to_have_class(re.compile(r"\bwf-reused\b"))
    expect(drawn.locator("g[data-node='b']")).to_have_class(re.compile(r"\bwf-done\b"))
    expect(drawn.locator("g[data-node='c']")).to_have_class(re.compile(r"\bwf-done\b"))
    expect(page.locator("li.node[data-node='a'] .badge")).to_have_text("reused")
    console.screenshot("workflow-rerun")
    assert runs_of(tmp_path) == {"a": 1, "b": 2, "c": 2}  # a was reused, not run again

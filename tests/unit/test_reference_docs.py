"""The generated reference (docs/reference/): every route described with examples, every setting
described, and the pages current with the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.reference_docs import (
    API_PAGE,
    ROOT,
    SETTINGS_PAGE,
    missing_documentation,
    openapi_document,
    operations,
    pages,
    render_api,
    undescribed_settings,
)


@pytest.fixture(scope="module")
def document() -> dict[str, object]:
    return openapi_document()


def test_every_route_has_a_description_and_examples(document: dict[str, object]) -> None:
    problems = missing_documentation(document)
    assert problems == [], (
        "describe these routes in serving/gateway/api_examples.py (ROUTES):\n" + "\n".join(problems)
    )


def test_every_setting_has_a_description() -> None:
    assert undescribed_settings() == [], "give these fields a description in core/settings.py"


def test_the_generated_pages_are_current() -> None:
    for path, text in pages().items():
        assert path.exists() and path.read_text() == text, (
            f"{path.relative_to(ROOT)} is stale: run `python -m cluster.reference_docs`"
        )


def test_the_api_page_shows_each_route_with_its_examples_and_errors(
    document: dict[str, object],
) -> None:
    page = render_api(document)
    for method, path, _ in operations(document):
        assert f"### `{method} {path}`" in page
    messages = page.split("### `POST /v1/conversations/{conversation_id}/messages`")[1]
    messages = messages.split("\n### ")[0]
    assert '"content": "What is 12*7?"' in messages  # the request example
    assert "Response `202`" in messages and '"turn_id"' in messages
    assert "| `404` | Not found |" in messages and "| `422` | Invalid fields |" in messages


def test_a_route_without_its_documentation_is_named(document: dict[str, object]) -> None:
    paths = dict(document["paths"])  # type: ignore[call-overload]
    bare = {"get": {"summary": "x", "responses": {"200": {"description": "ok"}}}}
    problems = missing_documentation({**document, "paths": {**paths, "/v1/new": bare}})
    assert problems == ["GET /v1/new: no description", "GET /v1/new: no response example"]


def test_the_pages_live_under_docs_reference() -> None:
    assert API_PAGE.parent == SETTINGS_PAGE.parent == Path(ROOT, "docs", "reference")

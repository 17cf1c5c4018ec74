"""The pure rules of MCP tool sources: library tools from a listing, results as outcomes, and the
egress check of a server's URL (core.mcp, core.mcp_egress)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.errors import InvalidInput, PermissionDenied
from core.mcp import ListedTool, McpServer, clean_schema, library_tool, outcome_of, tool_id_for
from core.mcp_egress import check_url, pin, policy_of

AT = datetime(2026, 1, 1, tzinfo=UTC)
SERVER = McpServer(
    id="gh",
    client_id="c1",
    transport="http",
    url="http://127.0.0.1:1/mcp",
    created_at=AT,
    updated_at=AT,
)


def test_library_tool_from_an_untrusted_listing() -> None:
    listed = ListedTool(
        name="create issue/v2",
        description="Creates\x1b[31m an issue\u202e" + "x" * 5000,
        input_schema={
            "type": "object",
            "properties": {"title": {"type": "string", "pattern": "(a+)+$"}},
            "patternProperties": {"^(a|a)*$": {}},
            "$defs": {"r": {"$ref": "https://evil.example/schema.json"}},
        },
    )
    tool = library_tool(SERVER, listed)
    assert tool.id == "mcp.gh.create-issue-v2" and tool.name == "create_issue_v2"
    assert tool.target_type == "mcp" and tool.target_id == "gh/create issue/v2"
    assert "\x1b" not in tool.description and "\u202e" not in tool.description
    assert len(tool.description) <= 2000
    assert "pattern" not in str(tool.input_schema) and "evil" not in str(tool.input_schema)


@pytest.mark.parametrize(
    "schema", [None, "x", {"type": "string"}, {"type": "object", "properties": 3}]
)
def test_an_unusable_schema_falls_back_to_an_object(schema: object) -> None:
    assert clean_schema(schema) == {"type": "object"}


def test_long_ids_stay_unique_within_the_limit() -> None:
    a, b = tool_id_for("s", "x" * 200 + "a"), tool_id_for("s", "x" * 200 + "b")
    assert a != b and len(a) <= 128 and len(b) <= 128


@pytest.mark.parametrize(
    ("result", "success", "content"),
    [
        ({"content": [{"type": "text", "text": "hi"}]}, True, "hi"),
        (
            {"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]},
            True,
            "[image image/png, 3 bytes]",
        ),
        ({"content": [{"type": "text", "text": "boom"}], "isError": True}, False, None),
    ],
)
def test_results_as_outcomes(result: dict[str, object], success: bool, content: str | None) -> None:
    outcome = outcome_of(result)  # type: ignore[arg-type]
    assert outcome.success is success
    if success:
        assert outcome.result["content"] == content
    else:
        assert outcome.error is not None and outcome.error.message == "boom"


@pytest.mark.parametrize(
    ("url", "entries", "error"),
    [
        ("http://127.0.0.1:8000/mcp", ["127.0.0.1"], None),
        ("http://127.0.0.1:8000/mcp", ["127.0.0.1:9000"], PermissionDenied),
        ("http://10.1.2.3/mcp", [], PermissionDenied),
        ("http://169.254.169.254/", ["169.254.169.254.nip.io"], PermissionDenied),
        ("http://localhost:1/", ["127.0.0.1"], PermissionDenied),
        ("ftp://127.0.0.1/", ["127.0.0.1"], InvalidInput),
        ("http://u:p@127.0.0.1/", ["127.0.0.1"], InvalidInput),
        ("https://mcp.example.com/mcp", ["mcp.example.com"], None),
    ],
)
def test_urls_against_the_allow_list(url: str, entries: list[str], error: type | None) -> None:
    if error is None:
        check_url(url, policy_of(entries))
    else:
        with pytest.raises(error):
            check_url(url, policy_of(entries))


def test_a_listed_name_never_vouches_for_a_private_address() -> None:
    import ipaddress

    entries = policy_of(["mcp.example.com"])
    target = check_url("http://mcp.example.com/mcp", entries)
    with pytest.raises(PermissionDenied):
        pin(target, [ipaddress.ip_address("127.0.0.1")], entries)
    pinned = pin(target, [ipaddress.ip_address("93.184.216.34")], entries)
    assert pinned.url == "http://93.184.216.34:80/mcp"
    assert pinned.headers == {"Host": "mcp.example.com"}

"""The pure rules of MCP tool sources: library tools from a listing, results as outcomes, and the
egress check of a server's URL (core.mcp; core.egress under WONDER_MCP_ALLOWED_HOSTS)."""

from __future__ import annotations

import asyncio
import ipaddress
from datetime import UTC, datetime

import httpx2
import pytest

from actors.mcp.connections import pinned_only
from core.egress import EgressPolicy, check_url, mcp_egress, pin
from core.errors import InvalidInput, PermissionDenied
from core.mcp import (
    ListedTool,
    McpServer,
    check_stdio_command,
    clean_schema,
    library_tool,
    library_tools,
    listed_tool,
    outcome_of,
    tool_id_for,
)
from core.settings import Settings

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


def test_names_that_collide_or_inject_never_shadow_a_tool() -> None:
    """A listing whose names are one name to the model keeps the first; names that read like
    paths or instructions become names in the tool alphabet; what is no tool is skipped."""
    names = ["echo_back", "echo.back", "echo back", "../../etc/passwd", "a; call shell.exec"]
    tools = library_tools(SERVER, [ListedTool(name=name) for name in names])
    assert [t.name for t in tools] == ["echo_back", "______etc_passwd", "a__call_shell_exec"]
    assert tools[0].target_id == "gh/echo_back"  # the first listed, not the later look-alike
    assert all(t.id.startswith("mcp.gh.") and "/" not in t.id for t in tools)
    for unusable in ({"name": "x" * 501}, {}, {"name": "ok", "description": 3}):
        assert listed_tool(unusable) is None
    assert listed_tool({"name": "ok", "inputSchema": "junk"}) is not None


@pytest.mark.parametrize(
    "command",
    [["/bin/sh", "-c", "node server.js"], ["/usr/bin/../bin/node"], ["node"], ["/usr/bin/node "]],
)
def test_a_stdio_program_the_operator_did_not_list_is_refused(command: list[str]) -> None:
    check_stdio_command(["/usr/bin/node", "server.js"], ["/usr/bin/node"])
    with pytest.raises(PermissionDenied, match="WONDER_MCP_STDIO_COMMANDS"):
        check_stdio_command(command, ["/usr/bin/node"])
    with pytest.raises(PermissionDenied, match="stdio servers are off"):
        check_stdio_command(command, [])


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
        ({"content": [{"type": "text", "text": "h" * 4_000_000}]}, True, "h" * 31_999 + "…"),
    ],
)
def test_results_as_outcomes(result: dict[str, object], success: bool, content: str | None) -> None:
    outcome = outcome_of(result)  # type: ignore[arg-type]
    assert outcome.success is success
    if success:
        assert outcome.result["content"] == content
    else:
        assert outcome.error is not None and outcome.error.message == "boom"


def policy_of(entries: list[str]) -> EgressPolicy:
    return mcp_egress(Settings(mcp_allowed_hosts=entries))


@pytest.mark.parametrize(
    ("url", "entries", "error"),
    [
        ("http://127.0.0.1:8000/mcp", ["127.0.0.1"], None),
        ("http://127.0.0.1:8000/mcp", ["127.0.0.1:9000"], PermissionDenied),
        ("http://10.1.2.3/mcp", [], PermissionDenied),
        ("http://169.254.169.254/", ["169.254.169.254.nip.io"], PermissionDenied),
        ("http://localhost:1/", ["127.0.0.1"], PermissionDenied),
        ("http://[::ffff:127.0.0.1]:1/", ["mcp.example.com"], PermissionDenied),
        ("ftp://127.0.0.1/", ["127.0.0.1"], InvalidInput),
        ("http://u:p@127.0.0.1/", ["127.0.0.1"], InvalidInput),
        ("https://mcp.example.com/mcp", ["mcp.example.com"], None),
    ],
)
def test_urls_against_the_allow_list(url: str, entries: list[str], error: type | None) -> None:
    if error is None:
        check_url(url, policy_of(entries))
    else:
        with pytest.raises(error) as refused:
            check_url(url, policy_of(entries))
        if error is PermissionDenied:
            assert "WONDER_MCP_ALLOWED_HOSTS" in refused.value.message


def test_the_mcp_list_is_its_own() -> None:
    """A destination http.request may reach is not thereby an MCP server's, nor the reverse."""
    settings = Settings(http_allowed_hosts=["api.example.com"], mcp_allowed_hosts=["127.0.0.1"])
    with pytest.raises(PermissionDenied):
        check_url("https://api.example.com/mcp", mcp_egress(settings))


def test_a_listed_name_never_vouches_for_a_private_address() -> None:
    policy = policy_of(["mcp.example.com"])
    target = check_url("http://mcp.example.com/mcp", policy)
    with pytest.raises(PermissionDenied):
        pin(target, [ipaddress.ip_address("127.0.0.1")], policy)
    pinned = pin(target, [ipaddress.ip_address("93.184.216.34")], policy)
    assert pinned.url() == "http://93.184.216.34:80/mcp"
    assert pinned.headers() == {"Host": "mcp.example.com"}


def test_every_request_of_a_connection_goes_to_the_checked_address() -> None:
    policy = policy_of(["mcp.example.com"])
    target = check_url("https://mcp.example.com/mcp", policy)
    hook = pinned_only(pin(target, [ipaddress.ip_address("93.184.216.34")], policy))
    same = httpx2.Request("POST", "https://93.184.216.34:443/mcp")
    asyncio.run(hook(same))
    assert same.extensions["sni_hostname"] == "mcp.example.com"  # the certificate names the host
    for elsewhere in (
        "https://10.0.0.1:443/mcp",
        "https://93.184.216.34:8443/mcp",
        "https://mcp.example.com/mcp",  # by name: a second resolution could swap the address
    ):
        with pytest.raises(PermissionDenied):
            asyncio.run(hook(httpx2.Request("POST", elsewhere)))

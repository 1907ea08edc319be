"""The CRM MCP server (`python -m crm mcp`) through the raw mcp SDK client: schemas, results that
equal the local tools', `_meta` idempotency keys, the bearer token and session counting."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from crm import tools
from crm.mcp_server import IDEMPOTENCY_META_KEY, build_server
from mcp import MCPError
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, Tool

from tests.support import crm_db as sqlite_check
from tests.support import procs
from tests.support.http import request_json
from tests.support.mcp_client import mcp_session, sessions_opened

TOKEN = "test-token-7f3a-for-the-crm-mcp-server-2Jw"


async def list_tools_by_name(url: str, token: str | None = None) -> dict[str, Tool]:
    async with mcp_session(url, token) as session:
        return {tool.name: tool for tool in (await session.list_tools()).tools}


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups."""
    inner = getattr(error, "exceptions", None)
    return [leaf for sub in inner for leaf in leaves(sub)] if inner else [error]


def structured(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    assert {"ok", "error"} <= set(result.structured_content), result.structured_content
    return result.structured_content


async def test_every_tool_publishes_an_output_schema_and_says_whether_it_writes(crm_mcp: str) -> None:
    listed = await list_tools_by_name(crm_mcp)
    assert set(listed) == set(tools.TOOLS)
    for name, tool in listed.items():
        assert tool.output_schema is not None, name
        assert {"ok", "error"} <= set(tool.output_schema["properties"]), name
        assert "ok" in tool.output_schema["required"], name
        assert tool.annotations is not None, name
        assert tool.annotations.read_only_hint is (name in tools.READ_ONLY_TOOLS), name
        assert tool.description, name
    writer = listed["add_timeline_note"].annotations
    assert writer is not None
    assert (writer.destructive_hint, writer.idempotent_hint) == (False, False)


async def test_mcp_schemas_are_those_of_the_local_functions(crm_mcp: str) -> None:
    # The MCP add_timeline_note is a wrapper (it reads `_meta`); its interface must not differ.
    reference = MCPServer("reference")
    for function in tools.TOOLS.values():
        reference.add_tool(function)
    expected = {tool.name: tool for tool in await reference.list_tools()}
    listed = await list_tools_by_name(crm_mcp)
    for name, tool in listed.items():
        assert tool.input_schema == expected[name].input_schema, name
        assert tool.output_schema == expected[name].output_schema, name
        assert tool.description == expected[name].description, name
    note_schema = listed["add_timeline_note"].input_schema
    assert set(note_schema["properties"]) == {"contact_id", "text", "idempotency_key"}
    assert sorted(note_schema["required"]) == ["contact_id", "text"]
    # Published, so a caller (the executor, for an edit too) refuses an over-long note before asking.
    assert note_schema["properties"]["text"]["maxLength"] == 4000
    assert all(prop.get("description") for prop in note_schema["properties"].values())


def _cases(db: Path) -> list[tuple[str, dict[str, Any]]]:
    dana = sqlite_check.contact_id(db, "dana@example.com")
    return [
        ("find_contact_by_email", {"email": "dana@example.com"}),
        ("find_contact_by_email", {"email": "nobody@example.com"}),
        ("find_contact_by_email", {"email": "not-an-email"}),
        ("list_timeline_notes", {"contact_id": dana, "limit": 3}),
        ("list_timeline_notes", {"contact_id": 999999}),
        ("list_timeline_notes", {"contact_id": dana, "limit": 0}),
        ("add_timeline_note", {"contact_id": dana, "text": "   "}),
        ("add_timeline_note", {"contact_id": 999999, "text": "hello"}),
        # A note over 4,000 characters is refused by the published schema (maxLength) before the
        # tool runs, so it is not a case for result parity; see the schema test above.
    ]


async def test_results_equal_the_local_tools_results(
    crm_mcp: str, crm_tools: ModuleType, crm_db: Path
) -> None:
    before = sqlite_check.count_notes(crm_db)
    async with mcp_session(crm_mcp) as session:
        for name, arguments in _cases(crm_db):
            remote = await session.call_tool(name, arguments)
            local = await crm_tools.TOOLS[name](**arguments)
            assert remote.is_error is False, (name, arguments, remote)
            assert structured(remote) == local.model_dump(mode="json"), (name, arguments)
    assert sqlite_check.count_notes(crm_db) == before


async def test_a_written_note_equals_the_local_result(
    crm_mcp: str, crm_tools: ModuleType, crm_db: Path
) -> None:
    # Same inputs, same key: the local call writes, the MCP call replays, so the results must match.
    arguments = {
        "contact_id": sqlite_check.contact_id(crm_db, "priya@example.com"),
        "text": "Priya wants the Q3 report",
        "idempotency_key": f"same-{uuid.uuid4()}",
    }
    local = await crm_tools.add_timeline_note(**arguments)
    async with mcp_session(crm_mcp) as session:
        remote = await session.call_tool("add_timeline_note", arguments)
    assert local.ok is True
    assert structured(remote) == local.model_dump(mode="json")
    assert sqlite_check.count_notes_with_key(crm_db, str(arguments["idempotency_key"])) == 1


async def test_find_dana_and_absent_contact(crm_mcp: str) -> None:
    async with mcp_session(crm_mcp) as session:
        dana = structured(await session.call_tool("find_contact_by_email", {"email": "DANA@example.com"}))
        absent = structured(await session.call_tool("find_contact_by_email", {"email": "ghost@example.com"}))
    assert dana["ok"] is True and dana["found"] is True
    assert (dana["name"], dana["company"]) == ("Dana Whitfield", "Whitfield Logistics")
    assert absent["ok"] is True and absent["found"] is False and absent["error"] is None


async def test_idempotency_key_in_request_meta(crm_mcp: str, crm_db: Path) -> None:
    contact_id = sqlite_check.contact_id(crm_db, "lena.fischer@example.net")
    key = f"meta-{uuid.uuid4()}"
    async with mcp_session(crm_mcp) as session:
        first = await session.call_tool(
            "add_timeline_note",
            {"contact_id": contact_id, "text": "Lena confirmed"},
            meta={IDEMPOTENCY_META_KEY: key},
        )
        again = await session.call_tool(
            "add_timeline_note",
            {"contact_id": contact_id, "text": "Lena confirmed"},
            meta={IDEMPOTENCY_META_KEY: key},
        )
    assert structured(first)["ok"] is True
    assert structured(again) == structured(first)
    assert sqlite_check.count_notes_with_key(crm_db, key) == 1


async def test_a_key_reused_for_another_note_is_an_error_result(crm_mcp: str, crm_db: Path) -> None:
    # Over MCP, the key in `_meta` and as an argument alike: another contact or text under a used key
    # is `ok: false` with the CRM's reason, never the first note with `ok: true`.
    lena = sqlite_check.contact_id(crm_db, "lena.fischer@example.net")
    tom = sqlite_check.contact_id(crm_db, "tom@example.org")
    key = f"reused-{uuid.uuid4()}"
    before = sqlite_check.count_notes(crm_db)
    async with mcp_session(crm_mcp) as session:
        first = structured(
            await session.call_tool(
                "add_timeline_note",
                {"contact_id": lena, "text": "Lena confirmed"},
                meta={IDEMPOTENCY_META_KEY: key},
            )
        )
        other_contact = structured(
            await session.call_tool(
                "add_timeline_note",
                {"contact_id": tom, "text": "Lena confirmed"},
                meta={IDEMPOTENCY_META_KEY: key},
            )
        )
        other_text = structured(
            await session.call_tool(
                "add_timeline_note", {"contact_id": lena, "text": "Lena declined", "idempotency_key": key}
            )
        )
        same = structured(
            await session.call_tool(
                "add_timeline_note",
                {"contact_id": lena, "text": "Lena confirmed"},
                meta={IDEMPOTENCY_META_KEY: key},
            )
        )
    assert first["ok"] is True and same == first
    for refused in (other_contact, other_text):
        assert refused["ok"] is False and refused["note_id"] is None
        assert "idempotency key" in refused["error"]
    assert sqlite_check.count_notes(crm_db) == before + 1
    assert sqlite_check.count_notes_with_key(crm_db, key) == 1


async def test_bad_arguments_still_carry_ok_and_error(crm_mcp: str, crm_db: Path) -> None:
    before = sqlite_check.count_notes(crm_db)
    async with mcp_session(crm_mcp) as session:
        bad_type = await session.call_tool("add_timeline_note", {"contact_id": "abc", "text": "x"})
        missing = await session.call_tool("add_timeline_note", {"contact_id": 1})
        unknown = await session.call_tool("delete_everything", {})
    for result in (bad_type, missing, unknown):
        assert result.is_error is True
        content = structured(result)
        assert content["ok"] is False and content["error"]
    assert "contact_id" in structured(bad_type)["error"]
    assert sqlite_check.count_notes(crm_db) == before


async def test_sessions_are_counted(crm_mcp: str) -> None:
    base = procs.base_url(crm_mcp)
    start = await sessions_opened(base)
    async with mcp_session(crm_mcp) as session:
        for _ in range(3):
            await session.call_tool("find_contact_by_email", {"email": "dana@example.com"})
        await session.list_tools()
    assert await sessions_opened(base) == start + 1
    async with mcp_session(crm_mcp) as session:
        await session.call_tool("find_contact_by_email", {"email": "dana@example.com"})
    assert await sessions_opened(base) == start + 2


async def test_token_is_required_when_configured(crm_rest: str, services: procs.Services) -> None:
    mcp = services.start(procs.crm_mcp(crm_rest, token=TOKEN))
    base = procs.base_url(mcp.url)

    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
    ):
        for url, method in ((mcp.url, "POST"), (f"{base}/stats", "GET")):
            status, body = request_json(
                method, url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers
            )
            assert status == 401, (headers, url)
            assert isinstance(body, dict) and body.get("error"), body

    with pytest.raises(Exception) as refused:  # noqa: B017 - the SDK wraps the error in ExceptionGroups
        async with mcp_session(mcp.url):
            pass
    assert any(isinstance(error, MCPError) for error in leaves(refused.value)), refused.value
    assert await sessions_opened(base, TOKEN) == 0

    async with mcp_session(mcp.url, TOKEN) as session:
        dana = structured(await session.call_tool("find_contact_by_email", {"email": "dana@example.com"}))
    assert dana["found"] is True
    assert await sessions_opened(base, TOKEN) == 1
    assert TOKEN not in mcp.output()


async def test_sigterm_with_an_open_session_stops_cleanly(crm_rest: str, services: procs.Services) -> None:
    mcp = services.start(procs.crm_mcp(crm_rest))
    async with mcp_session(mcp.url) as session:
        await session.call_tool("find_contact_by_email", {"email": "dana@example.com"})
        started = time.monotonic()
        returncode = mcp.stop()
        elapsed = time.monotonic() - started
    assert returncode == 0, mcp.output()
    assert elapsed < procs.STOP_TIMEOUT, mcp.output()
    assert "listening on http://127.0.0.1:" in mcp.output()
    assert "ERROR" not in mcp.output(), mcp.output()


def test_rest_stops_cleanly_on_sigterm(fresh_crm_db: Path, services: procs.Services) -> None:
    rest = services.start(procs.crm_rest(fresh_crm_db))
    assert rest.stop() == 0, rest.output()
    assert "listening on http://127.0.0.1:" in rest.output()


async def test_plain_dict_server_publishes_no_output_schema(services: procs.Services) -> None:
    # The bridge's tests rely on this server answering without structuredContent.
    server = services.start(procs.plain_dict_mcp())
    async with mcp_session(server.url) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        result = await session.call_tool("echo_note", {"text": "hello"})
    assert set(listed) == {"echo_note", "add_echo_tool"}
    assert listed["echo_note"].output_schema is None
    assert result.is_error is False
    assert result.structured_content is None
    assert [block.type for block in result.content] == ["text"]
    assert json.loads(result.content[0].text) == {"ok": True, "error": None, "text": "hello"}
    assert await sessions_opened(procs.base_url(server.url)) == 1


def test_server_is_named_crm() -> None:
    assert build_server().name == "crm"


@pytest.mark.parametrize("token", ["replace-me", "x7Kq2", "replace-me-with-a-long-random-value-please"])
def test_the_crm_refuses_a_short_or_placeholder_token_at_start(token: str) -> None:
    """deploy/example.env's `replace-me` must never guard a deployment: the CRM's REST API and MCP server
    stop at start, naming the variable and never the value."""
    from crm import config

    with pytest.raises(SystemExit) as stopped:
        config.strong("CRM_MCP_TOKEN", token)
    assert "CRM_MCP_TOKEN" in str(stopped.value) and token not in str(stopped.value)
    assert config.strong("CRM_MCP_TOKEN", TOKEN) == TOKEN

"""MCPRuntime against real MCP servers: sessions, catalogue, results, errors, reconnection."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import httpx2
import pytest

from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.errors import ServerUnavailableError, ToolArgumentsError, ToolNotFoundError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from tests.support import procs
from tests.support.mcp_client import connections_opened

SERVER = "crm"
CRM_TOOLS = ("find_contact_by_email", "add_timeline_note", "list_timeline_notes")


def runtime_for(url: str, *, token: str | None = None, timeout: float = 10.0) -> MCPRuntime:
    server = MCPServerConfig(name="crm", url=url, api_key=token, timeout=timeout)
    return MCPRuntime({"crm": server}, connect_timeout=5.0)


def note_count(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM notes").fetchone()[0])


async def test_every_crm_tool_is_structured_through_the_runtime(crm_mcp: str) -> None:
    runtime = runtime_for(crm_mcp)
    try:
        catalogue = await runtime.tools("crm")
        assert set(CRM_TOOLS) <= set(catalogue)
        for name in CRM_TOOLS:
            assert catalogue[name].output_schema is not None, name
        found = await runtime.invoke(SERVER, "find_contact_by_email", {"email": "dana@example.com"})
        assert found.structured and found.source == "mcp:crm"
        assert found.ok and found.data["found"] is True
        assert found.data["name"] == "Dana Whitfield"
        notes = await runtime.invoke(
            SERVER, "list_timeline_notes", {"contact_id": found.data["contact_id"], "limit": 3}
        )
        assert notes.structured and notes.ok and isinstance(notes.data["notes"], list)
    finally:
        await runtime.aclose()


async def test_absent_contact_is_ok_not_found(crm_mcp: str) -> None:
    runtime = runtime_for(crm_mcp)
    try:
        result = await runtime.invoke(SERVER, "find_contact_by_email", {"email": "nobody@example.com"})
        assert result.ok is True
        assert result.error is None
        assert result.data["found"] is False
    finally:
        await runtime.aclose()


async def test_local_and_mcp_tools_return_the_same_data(crm_mcp: str, crm_tools: object) -> None:
    from crm import tools

    runtime = runtime_for(crm_mcp)
    try:
        for email in ("dana@example.com", "PRIYA@example.com", "nobody@example.com", "not-an-email"):
            local = (await tools.find_contact_by_email(email)).model_dump(mode="json")
            remote = await runtime.invoke(SERVER, "find_contact_by_email", {"email": email})
            assert remote.data == local, email
    finally:
        await runtime.aclose()


async def test_hundred_calls_use_one_session(crm_mcp: str) -> None:
    base = procs.base_url(crm_mcp)
    before = await connections_opened(base)
    runtime = runtime_for(crm_mcp)
    try:
        for _ in range(100):
            result = await runtime.invoke(SERVER, "find_contact_by_email", {"email": "dana@example.com"})
            assert result.ok
    finally:
        await runtime.aclose()
    assert await connections_opened(base) - before == 1
    assert runtime.sessions_opened == 1


async def test_tool_returning_plain_dict_is_marked_unstructured_with_a_warning(
    services: procs.Services, caplog: pytest.LogCaptureFixture
) -> None:
    server = services.start(procs.plain_dict_mcp())
    runtime = MCPRuntime({"plain": MCPServerConfig(name="plain", url=server.url)})
    try:
        with caplog.at_level(logging.WARNING, logger="mcp_bridge"):
            result = await runtime.invoke("plain", "echo_note", {"text": "hello"})
    finally:
        await runtime.aclose()
    assert result.structured is False
    assert result.ok is True  # recovered from the JSON text block
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("echo_note" in w and "no output schema" in w and "pydantic model" in w for w in warnings)


async def test_arguments_are_validated_before_sending(crm_mcp: str) -> None:
    runtime = runtime_for(crm_mcp)
    try:
        with pytest.raises(ToolArgumentsError, match="contact_id"):
            await runtime.invoke(SERVER, "add_timeline_note", {"contact_id": "one", "text": "x"})
        with pytest.raises(ToolArgumentsError, match="text"):
            await runtime.invoke(SERVER, "add_timeline_note", {"contact_id": 1})
    finally:
        await runtime.aclose()


async def test_tool_error_becomes_ok_false(crm_mcp: str) -> None:
    runtime = runtime_for(crm_mcp)
    try:
        result = await runtime.invoke(SERVER, "add_timeline_note", {"contact_id": 999999, "text": "hello"})
        assert result.ok is False
        assert result.error and "contact" in result.error.lower()
    finally:
        await runtime.aclose()


async def test_the_runtime_is_keyed_by_server_and_tool(crm_mcp: str) -> None:
    """Which skill may call what is the skill's (its tool-source lines, read by ToolBox); the runtime
    refuses a tool its server does not serve and a server endpoints.yml does not define."""
    runtime = runtime_for(crm_mcp)
    try:
        assert (await runtime.get_tool(SERVER, "add_timeline_note")).name == "add_timeline_note"
        with pytest.raises(ToolNotFoundError, match="delete_everything"):
            await runtime.invoke(SERVER, "delete_everything", {})
        with pytest.raises(ToolNotFoundError, match="unknown"):
            await runtime.invoke("unknown", "add_timeline_note", {"contact_id": 1, "text": "x"})
    finally:
        await runtime.aclose()


async def test_unreachable_server_raises_typed_error_and_writes_nothing(fresh_crm_db: Path) -> None:
    runtime = runtime_for(f"http://127.0.0.1:{procs.free_port()}/mcp")
    before = note_count(fresh_crm_db)
    try:
        with pytest.raises(ServerUnavailableError) as caught:
            await runtime.invoke(SERVER, "add_timeline_note", {"contact_id": 1, "text": "x"})
        assert caught.value.may_have_run is False
    finally:
        await runtime.aclose()
    assert note_count(fresh_crm_db) == before


async def test_next_call_after_a_legacy_server_restart_succeeds_on_a_new_session(
    services: procs.Services,
) -> None:
    """2025-11-25: the restarted server does not know the session; the call never ran there, so the
    runtime opens a new session and sends it once more."""
    port = procs.free_port()
    server = services.start(procs.era_mcp("legacy", port))
    runtime = MCPRuntime({"items": MCPServerConfig(name="items", url=server.url)})
    try:
        assert (await runtime.invoke("items", "add_item", {"text": "first"})).ok
        server.stop()
        services.start(procs.era_mcp("legacy", port))
        again = await runtime.invoke("items", "add_item", {"text": "second"})
        assert again.ok and again.data["id"] == 1  # the new server's first write, made once
        assert runtime.sessions_opened == 2
        base = procs.base_url(server.url)
        assert httpx2.get(f"{base}/writes").json()["texts"] == ["second"]
        # The first try carried the old session's id and was refused unread; the second opened one.
        assert httpx2.get(f"{base}/methods").json().count("initialize") == 1
    finally:
        await runtime.aclose()


async def test_a_modern_server_restart_is_invisible_to_the_runtime(services: procs.Services) -> None:
    """2026-07-28 is stateless: the restarted server serves the next call as it is, no new connect."""
    port = procs.free_port()
    server = services.start(procs.era_mcp("modern", port))
    runtime = MCPRuntime({"items": MCPServerConfig(name="items", url=server.url)})
    try:
        assert (await runtime.invoke("items", "add_item", {"text": "first"})).ok
        server.stop()
        services.start(procs.era_mcp("modern", port))
        again = await runtime.invoke("items", "add_item", {"text": "second"})
        assert again.ok and again.data["id"] == 1
        assert runtime.sessions_opened == 1
        methods = httpx2.get(f"{procs.base_url(server.url)}/methods").json()
        assert "initialize" not in methods and methods.count("tools/call") == 1
    finally:
        await runtime.aclose()


async def test_server_down_then_back_without_restarting_the_runtime(
    crm_rest: str, services: procs.Services
) -> None:
    port = procs.free_port()
    server = services.start(procs.crm_mcp(crm_rest, port=port))
    runtime = runtime_for(server.url)
    try:
        assert (await runtime.invoke(SERVER, "find_contact_by_email", {"email": "dana@example.com"})).ok
        server.stop()
        with pytest.raises(ServerUnavailableError):
            await runtime.invoke(SERVER, "find_contact_by_email", {"email": "dana@example.com"})
        services.start(procs.crm_mcp(crm_rest, port=port))
        assert (await runtime.invoke(SERVER, "find_contact_by_email", {"email": "dana@example.com"})).ok
    finally:
        await runtime.aclose()


async def test_token_is_required_when_configured(crm_rest: str, services: procs.Services) -> None:
    server = services.start(procs.crm_mcp(crm_rest, token="s3cret-token-for-the-crm-mcp-server-4Kq8Zr"))
    without = runtime_for(server.url)
    with_token = runtime_for(server.url, token="s3cret-token-for-the-crm-mcp-server-4Kq8Zr")
    try:
        with pytest.raises(ServerUnavailableError):
            await without.invoke(SERVER, "find_contact_by_email", {"email": "dana@example.com"})
        result = await with_token.invoke(SERVER, "find_contact_by_email", {"email": "dana@example.com"})
        assert result.ok and result.data["found"] is True
    finally:
        await without.aclose()
        await with_token.aclose()


async def test_catalogue_is_cached_and_refreshed_on_list_changed(services: procs.Services) -> None:
    import asyncio

    server = services.start(procs.plain_dict_mcp())
    runtime = MCPRuntime({"plain": MCPServerConfig(name="plain", url=server.url)})
    try:
        assert set(await runtime.tools("plain")) == {"echo_note", "add_echo_tool"}
        await runtime.invoke("plain", "add_echo_tool", {"name": "late_echo"})
        # The server announces the change on the session's stream; the cached catalogue follows it.
        for _ in range(50):
            if "late_echo" in await runtime.tools("plain"):
                break
            await asyncio.sleep(0.1)
        assert "late_echo" in await runtime.tools("plain")
        assert runtime.sessions_opened == 1
    finally:
        await runtime.aclose()

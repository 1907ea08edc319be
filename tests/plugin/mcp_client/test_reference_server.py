"""The bridge against a server nobody here wrote: @modelcontextprotocol/server-everything, the MCP
project's TypeScript reference server (TypeScript SDK 1.x, so a 2025-11-25 server), over streamable
HTTP from npm (tests/fixtures/everything, installed by `make setup`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mcp_bridge.config.servers import MCPServerConfig
from mcp_bridge.mcp_client.runtime import MCPRuntime
from tests.plugin.cli.test_check import bot, check, edit, initialised_bot  # noqa: F401 - fixtures
from tests.support import procs
from tests.support.bots import mcp_bridge


@pytest.fixture(scope="module")
def everything() -> Iterator[str]:
    with procs.everything_mcp() as server:
        yield server.url


@pytest.fixture
async def runtime(everything: str) -> AsyncIterator[MCPRuntime]:
    made = MCPRuntime(
        {"everything": MCPServerConfig(name="everything", url=everything)}, connect_timeout=10.0
    )
    try:
        yield made
    finally:
        await made.aclose()


async def test_the_reference_server_is_reached_over_the_2025_11_25_handshake(runtime: MCPRuntime) -> None:
    tools = await runtime.tools("everything")
    assert {"echo", "get-structured-content", "get-sum"} <= set(tools)
    described = await runtime.describe("everything")
    assert described.protocol_version == "2025-11-25"
    assert described.server_info is not None and described.server_info.startswith("mcp-servers/everything")
    assert "tools (listChanged)" in described.capabilities


async def test_its_structured_result_passes_its_output_schema(runtime: MCPRuntime) -> None:
    result = await runtime.invoke("everything", "get-structured-content", {"location": "Chicago"})
    assert result.structured and result.ok
    assert set(result.data) >= {"temperature", "conditions", "humidity"}
    unstructured = await runtime.invoke("everything", "echo", {"message": "hello"})
    assert unstructured.structured is False and unstructured.data["text"] == "Echo: hello"


def test_tools_and_live_check_say_revision_auth_and_capabilities(bot: Path, everything: str) -> None:  # noqa: F811
    listed = mcp_bridge("tools", everything, cwd=bot)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith(f"server: {everything}, serverInfo mcp-servers/everything")
    assert lines[1] == "protocol: 2025-11-25 (initialize handshake, one session)"
    assert lines[2] == "auth: none"
    assert lines[3].startswith("capabilities: ") and "tools (listChanged)" in lines[3]
    assert any(line.split()[:5] == ["get-structured-content", "yes", "no", "yes", "yes"] for line in lines)

    skill = bot / "skills" / "save_reminder.yml"
    skill.write_text(skill.read_text().replace("create_reminder", "get-structured-content"))
    edit(skill, "      text: {slot: reminder_text}\n", "      location: {slot: reminder_text}\n")
    code, output = check(bot, "--live", url=everything)
    assert code == 0, output
    assert "live: 1 MCP tool(s) checked at their servers" in output
    assert "protocol: 2025-11-25 (initialize handshake, one session)" in output.splitlines()

"""Local tools (mcp_bridge/tools/local.py): the bot registers its async functions, by its name or one it
gives, and each runs behind the one tool interface with its key only when it takes one; a tool that
raises may have written, and says so without passing on what it raised."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import mcp_bridge
from mcp_bridge.errors import ToolCallError
from mcp_bridge.tools import local
from mcp_bridge.tools.context import CallContext
from mcp_bridge.tools.local import LocalTool, local_tool, register_local_tools, registered_local_tools


@pytest.fixture
def registry() -> Iterator[None]:
    """The process's registry as it was, after the test (a test's tools are not another's)."""
    before = dict(local._REGISTRY)
    yield
    local._REGISTRY.clear()
    local._REGISTRY.update(before)


def test_the_bot_registers_from_the_top_of_the_package(registry: None) -> None:
    assert mcp_bridge.local_tool is local_tool and mcp_bridge.register_local_tools is register_local_tools

    @mcp_bridge.local_tool
    async def add_note(text: str) -> dict[str, Any]:
        return {}

    @mcp_bridge.local_tool(name="remind")
    async def create_reminder(text: str) -> dict[str, Any]:
        return {}

    assert registered_local_tools()["add_note"] is add_note
    assert (
        registered_local_tools()["remind"] is create_reminder
        and "create_reminder" not in registered_local_tools()
    )


def test_a_function_that_is_not_async_is_refused_by_name(registry: None) -> None:
    def blocking(text: str) -> dict[str, Any]:
        return {}

    with pytest.raises(TypeError, match="'blocking' must be an async function"):
        register_local_tools({"blocking": blocking})
    assert "blocking" not in registered_local_tools()


async def test_the_key_goes_only_to_a_tool_that_takes_it() -> None:
    seen: list[tuple[str, str | None]] = []

    async def keyed(text: str, idempotency_key: str | None = None) -> dict[str, Any]:
        seen.append((text, idempotency_key))
        return {}

    async def plain(text: str) -> dict[str, Any]:
        seen.append((text, None))
        return {}

    context = CallContext(conversation_id="c1", idempotency_key="k1")
    assert LocalTool("keyed", keyed).honours_idempotency_key()
    assert not LocalTool("plain", plain).honours_idempotency_key()
    await LocalTool("keyed", keyed).call({"text": "a"}, context)
    await LocalTool("plain", plain).call({"text": "b"}, context)
    assert seen == [("a", "k1"), ("b", None)]


async def test_a_tool_that_raises_may_have_written_and_its_error_stays_in_the_log() -> None:
    async def broken(text: str) -> dict[str, Any]:
        raise RuntimeError(f"the CRM said no to {text}")

    with pytest.raises(ToolCallError) as raised:
        await LocalTool("broken", broken).call({"text": "secret note"}, CallContext())
    assert raised.value.may_have_run
    assert "RuntimeError" in str(raised.value) and "secret note" not in str(raised.value)

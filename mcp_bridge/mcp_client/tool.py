"""A tool of an MCP server behind the one tool interface, :class:`~mcp_bridge.tools.sources.Tool`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.tools.results import ToolResult
from mcp_bridge.tools.sources import Annotations


@dataclass(frozen=True)
class MCPTool:
    """Tool ``name`` of MCP server ``server``."""

    name: str
    server: str
    runtime: MCPRuntime
    source: str  # "mcp:<server>", as the skill's tool-source line says

    async def input_schema(self) -> Mapping[str, Any]:
        return (await self.runtime.get_tool(self.server, self.name)).input_schema

    async def annotations(self) -> Annotations:
        """The server's claim, and whether anyone vouched for the server (``trusted``)."""
        if not self.runtime.servers[self.server].trusted:
            return Annotations()  # claims from a server nobody vouched for count for nothing: not read
        info = await self.runtime.get_tool(self.server, self.name)
        read_only = info.annotations is not None and info.annotations.read_only_hint is True
        destructive = not read_only and (
            info.annotations is None or info.annotations.destructive_hint is not False
        )
        return Annotations(read_only=read_only, vouched=True, destructive=destructive)

    def honours_idempotency_key(self) -> bool:
        return self.runtime.servers[self.server].honours_idempotency_key

    async def call(
        self,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str | None,
        slots: Mapping[str, Any] | None = None,
    ) -> ToolResult:
        meta = {"idempotency_key": idempotency_key} if idempotency_key else None
        return await self.runtime.invoke(self.server, self.name, arguments, meta=meta, slots=slots)

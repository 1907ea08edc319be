"""A tool of an MCP server behind the one tool interface, :class:`~mcp_bridge.tools.sources.Tool`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_bridge.auth.person import Acting
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.tools.context import CallContext
from mcp_bridge.tools.results import ToolResult
from mcp_bridge.tools.sources import Annotations


def _acting(context: CallContext) -> Acting | None:
    """Whom a server that acts as the person is asked for: the person the context names."""
    if context.conversation_id is None and context.person is None:
        return None
    return Acting(context.conversation_id or "", context.person, context.skill)


@dataclass(frozen=True)
class MCPTool:
    """Tool ``name`` of MCP server ``server``."""

    name: str
    server: str
    runtime: MCPRuntime
    source: str  # "mcp:<server>", as the skill's tool-source line says

    async def input_schema(self, context: CallContext) -> Mapping[str, Any]:
        return (await self.runtime.get_tool(self.server, self.name, acting=_acting(context))).input_schema

    async def annotations(self, context: CallContext) -> Annotations:
        """The server's claim, and whether anyone vouched for the server (``trusted``)."""
        if not self.runtime.servers[self.server].trusted:
            return Annotations()  # claims from a server nobody vouched for count for nothing: not read
        info = await self.runtime.get_tool(self.server, self.name, acting=_acting(context))
        read_only = info.annotations is not None and info.annotations.read_only_hint is True
        destructive = not read_only and (
            info.annotations is None or info.annotations.destructive_hint is not False
        )
        return Annotations(read_only=read_only, vouched=True, destructive=destructive)

    def honours_idempotency_key(self) -> bool:
        return self.runtime.servers[self.server].honours_idempotency_key

    async def call(self, arguments: Mapping[str, Any], context: CallContext) -> ToolResult:
        meta = {"idempotency_key": context.idempotency_key} if context.idempotency_key else None
        resume = context.resume
        return await self.runtime.invoke(
            self.server,
            self.name,
            arguments,
            meta=meta,
            slots=context.slots,
            input_responses=resume.responses if resume is not None else None,
            request_state=resume.request_state if resume is not None else None,
            handle=resume.handle if resume is not None else None,
            acting=_acting(context),
        )

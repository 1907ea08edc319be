"""The one interface every tool source implements, :class:`Tool`: a local Python function
(:mod:`mcp_bridge.tools.local`) or a tool of an MCP server (:mod:`mcp_bridge.mcp_client.tool`).

Everything a skill does with a tool (check its arguments, read its annotations, call it) goes
through these few methods, whatever the source. A local function declares that it honours the
idempotency key by taking an ``idempotency_key`` parameter; an MCP server by
``honours_idempotency_key: true`` in endpoints.yml. Resolution (which tool a skill's name means) is
:class:`mcp_bridge.skills.toolbox.ToolBox`'s; the layers around every call are
:mod:`mcp_bridge.tools.pipeline`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mcp_bridge.tools.context import CallContext
from mcp_bridge.tools.results import ToolResult

__all__ = ["Annotations", "Tool"]


@dataclass(frozen=True)
class Annotations:
    """What a tool's source says about it, for the gate (:func:`mcp_bridge.confirmation.gate.gate`)."""

    # The tool claims to only read (an MCP tool's ``readOnlyHint``).
    read_only: bool = False
    # Its source is vouched for: the bot's own code, or an MCP server marked ``trusted``.
    vouched: bool = False
    # The tool may destroy or overwrite data (MCP's ``destructiveHint``, true unless a vouched-for
    # server says false or read-only): no remembered permission covers it unless the skill says so.
    destructive: bool = True


class Tool(Protocol):
    """One tool, whatever its source. Every method is given the call's context
    (:class:`~mcp_bridge.tools.context.CallContext`): a server that acts as the person answers even
    its catalogue only to that person."""

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> str:
        """ "local" or "mcp:<server>", as the skill's tool-source line says."""
        ...

    async def input_schema(self, context: CallContext) -> Mapping[str, Any]: ...

    async def annotations(self, context: CallContext) -> Annotations: ...

    def honours_idempotency_key(self) -> bool:
        """True when a repeat under the same idempotency key cannot write twice."""
        ...

    async def call(self, arguments: Mapping[str, Any], context: CallContext) -> ToolResult:
        """Run the tool with the context's idempotency key. An MCP server's ``meta_map.from_slots``
        sends some of the context's slots in ``_meta``; a local tool gets none of them."""
        ...

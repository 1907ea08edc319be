"""Which tool a skill's name means: one of the bot's local functions, or a tool of an MCP server.

A skill names a tool and where it comes from (``local`` or ``mcp:<server>``: the tool-source lines,
the only place that says which skill uses which server). :class:`ToolBox` resolves that name, at
dispatch time, to one :class:`~mcp_bridge.tools.sources.Tool` wrapped in the layers every call goes
through (:func:`mcp_bridge.tools.pipeline.layered`: exactly once, audited, timed), so everything after
resolution (schema checks, annotations, the call) is the same whatever the source.

The local functions are the ones the bot registered (:mod:`mcp_bridge.tools.local`), given to it at
start-up.
"""

from __future__ import annotations

from collections.abc import Mapping

from mcp_bridge.errors import ToolNotFoundError
from mcp_bridge.mcp_client.runtime import MCPRuntime
from mcp_bridge.mcp_client.tool import MCPTool
from mcp_bridge.observability.audit import AuditLog
from mcp_bridge.skills.files import Skill
from mcp_bridge.tools.local import LocalTool, ToolFunction
from mcp_bridge.tools.pipeline import layered
from mcp_bridge.tools.sources import Tool

__all__ = ["Resolved", "ToolBox"]

# What a skill's tool name resolved to: the tool, or why nothing.
Resolved = Tool | ToolNotFoundError


class ToolBox:
    """Resolves a skill's tool name to a :class:`Tool`, by its tool-source line: a registered local
    function for ``local``, the server's tool for ``mcp:<server>``; wrapped in every layer.

    With ``audit``, the tools it resolves record every call there
    (:class:`~mcp_bridge.tools.pipeline.Audited`).
    """

    def __init__(
        self, local: Mapping[str, ToolFunction], runtime: MCPRuntime | None, *, audit: AuditLog | None = None
    ) -> None:
        self._local = dict(local)
        self.runtime = runtime
        self.audit = audit
        # Resolution depends on nothing that changes after start-up: each skill's name is resolved
        # once, {(skill id, name): (the skill's tool-source line, the tool)}.
        self._resolved: dict[tuple[str, str], tuple[object, Tool]] = {}

    def find(self, skill: Skill, name: str) -> Resolved:
        """The tool ``skill`` calls ``name``, or why none (a name that resolves to nothing is refused
        loudly when it is run, and asked about like any other before that)."""
        try:
            return self.resolve(skill, name)
        except ToolNotFoundError as exc:
            return exc

    def resolve(self, skill: Skill, name: str) -> Tool:
        """The tool ``skill`` calls ``name``; :class:`ToolNotFoundError` when it resolves to nothing."""
        source = skill.tools.get(name)
        cached = self._resolved.get((skill.id, name))
        if cached is not None and cached[0] is source:
            return cached[1]
        tool = layered(self._source(skill, name), skill_id=skill.id, audit=self.audit)
        self._resolved[(skill.id, name)] = (source, tool)
        return tool

    def _source(self, skill: Skill, name: str) -> Tool:
        source = skill.tools.get(name)
        if source is not None and source.kind == "local" and name in self._local:
            return LocalTool(name, self._local[name])
        if (
            source is not None
            and source.kind == "mcp"
            and source.server is not None
            and self.runtime is not None
            and source.server in self.runtime.servers
        ):
            return MCPTool(name, source.server, self.runtime, str(source))
        raise ToolNotFoundError(
            f"{name!r} is not a local tool of skill {skill.id!r} nor an MCP tool it imports"
        )

    async def aclose(self) -> None:
        if self.runtime is not None:
            await self.runtime.aclose()

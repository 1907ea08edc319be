"""Every tool source behind one interface: a local Python function or a tool of an MCP server.

A skill names a tool and where it comes from (``local`` or ``mcp:<server>``: the tool-source lines,
the only place that says which skill uses which server). :class:`ToolBox` resolves that name, at
dispatch time, to one :class:`~mcp_bridge.pipeline.Tool` and wraps it in the layers every call goes
through (:func:`mcp_bridge.pipeline.layered`: exactly once, audited, timed), so everything after
resolution (schema checks, annotations, the call) is the same whatever the source.

Local tools are the bot's own functions, registered by the bot (never by this package)::

    from mcp_bridge import local_tool

    @local_tool
    async def add_timeline_note(contact_id: int, text: str) -> NoteResult: ...

A local function declares that it honours the idempotency key by taking an ``idempotency_key``
parameter; an MCP server by ``honours_idempotency_key: true`` in endpoints.yml.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver.utilities.func_metadata import func_metadata

from mcp_bridge.audit import AuditLog
from mcp_bridge.errors import ToolCallError, ToolNotFoundError
from mcp_bridge.pipeline import Annotations, Tool, layered
from mcp_bridge.results import ToolResult, from_local
from mcp_bridge.runtime import MCPRuntime
from mcp_bridge.schema import validate_against_schema
from mcp_bridge.skills import Skill

__all__ = [
    "LocalTool",
    "MCPTool",
    "Tool",
    "ToolBox",
    "ToolFunction",
    "local_input_schema",
    "local_tool",
    "register_local_tools",
    "registered_local_tools",
]

log = logging.getLogger(__name__)

ToolFunction = Callable[..., Any]


# -- local tools -----------------------------------------------------------------------------

_REGISTRY: dict[str, ToolFunction] = {}


def local_tool(function: ToolFunction | None = None, *, name: str | None = None) -> Any:
    """Register ``function`` as a local tool, under its own name or ``name``; usable as a decorator."""

    def register(fn: ToolFunction) -> ToolFunction:
        register_local_tools({name or fn.__name__: fn})
        return fn

    return register(function) if function is not None else register


def register_local_tools(tools: Mapping[str, ToolFunction]) -> None:
    """Register several local tools at once (``{name: async function}``)."""
    for tool_name, function in tools.items():
        if not inspect.iscoroutinefunction(function):
            raise TypeError(f"local tool {tool_name!r} must be an async function")
        _REGISTRY[tool_name] = function


def registered_local_tools() -> dict[str, ToolFunction]:
    return dict(_REGISTRY)


@functools.cache
def local_input_schema(function: ToolFunction) -> dict[str, Any]:
    """The input schema the mcp SDK would publish for ``function`` served over MCP."""
    schema: dict[str, Any] = func_metadata(function).arg_model.model_json_schema()
    return schema


@functools.cache
def _takes_idempotency_key(function: ToolFunction) -> bool:
    return "idempotency_key" in inspect.signature(function).parameters


class _LocalToolFailed(ToolCallError):
    may_have_run = True


@dataclass(frozen=True)
class LocalTool:
    name: str
    function: ToolFunction
    source: str = "local"

    async def input_schema(self) -> Mapping[str, Any]:
        return local_input_schema(self.function)

    async def annotations(self) -> Annotations:
        return Annotations(read_only=False, vouched=True)  # the bot's own code, which claims nothing

    def honours_idempotency_key(self) -> bool:
        return _takes_idempotency_key(self.function)  # declared by its signature

    async def call(
        self,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str | None,
        slots: Mapping[str, Any] | None = None,
    ) -> ToolResult:
        validate_against_schema(self.name, local_input_schema(self.function), arguments)
        kwargs = dict(arguments)
        if idempotency_key is not None and _takes_idempotency_key(self.function):
            kwargs["idempotency_key"] = idempotency_key
        try:
            value = await self.function(**kwargs)
        except Exception as exc:  # a local tool's bug must not reach rasa_sdk
            log.exception("local tool %r raised", self.name)
            raise _LocalToolFailed(f"local tool {self.name!r} raised {type(exc).__name__}") from exc
        return from_local(self.name, value)


# -- MCP tools -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MCPTool:
    """Tool ``name`` of MCP server ``server``."""

    name: str
    server: str
    runtime: MCPRuntime

    @property
    def source(self) -> str:
        return f"mcp:{self.server}"

    async def input_schema(self) -> Mapping[str, Any]:
        return (await self.runtime.get_tool(self.server, self.name)).input_schema

    async def annotations(self) -> Annotations:
        """The server's claim, and whether anyone vouched for the server (``trusted``)."""
        if not self.runtime.servers[self.server].trusted:
            return Annotations()  # claims from a server nobody vouched for count for nothing: not read
        info = await self.runtime.get_tool(self.server, self.name)
        read_only = info.annotations is not None and info.annotations.read_only_hint is True
        return Annotations(read_only=read_only, vouched=True)

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


# -- resolution ------------------------------------------------------------------------------


class ToolBox:
    """Resolves a skill's tool name to a :class:`Tool`, by its tool-source line: a registered local
    function for ``local``, the server's tool for ``mcp:<server>``; wrapped in every layer.

    With ``audit``, the tools it resolves record every call there (:class:`~mcp_bridge.pipeline.Audited`).
    """

    def __init__(
        self, local: Mapping[str, ToolFunction], runtime: MCPRuntime | None, *, audit: AuditLog | None = None
    ) -> None:
        self._local = dict(local)
        self.runtime = runtime
        self.audit = audit

    def resolve(self, skill: Skill, name: str) -> Tool:
        """The tool ``skill`` calls ``name``; :class:`ToolNotFoundError` when it resolves to nothing."""
        return layered(self._source(skill, name), skill_id=skill.id, audit=self.audit)

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
            return MCPTool(name, source.server, self.runtime)
        raise ToolNotFoundError(
            f"{name!r} is not a local tool of skill {skill.id!r} nor an MCP tool it imports"
        )

    async def aclose(self) -> None:
        if self.runtime is not None:
            await self.runtime.aclose()

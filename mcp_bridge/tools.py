"""Every tool source behind one interface: a local Python function or a tool of an MCP server.

A skill names a tool and where it comes from (``local`` or ``mcp:<server>``). :class:`ToolBox`
resolves that name, at dispatch time, to one :class:`Tool`, and everything after that (schema
checks, annotations, the call) goes through the same three methods whatever the source.

Local tools are the bot's own functions, registered by the bot (never by this package)::

    from mcp_bridge import local_tool

    @local_tool
    async def add_timeline_note(contact_id: int, text: str) -> NoteResult: ...

A confirmed write carries an idempotency key. :func:`call_exactly_once` repeats a call whose
outcome is unknown once, with the same key, but only when the tool is declared to honour the key (an
MCP server's ``honours_idempotency_key: true``; a local function that takes an ``idempotency_key``
parameter): a store that ignores the key would write twice. Otherwise the outcome stays unknown.

With an audit trail, every call of a resolved tool is an entry of it (``decision: "called"``,
see :mod:`mcp_bridge.audit`), whoever made the call: what the action server really called.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mcp.server.mcpserver.utilities.func_metadata import func_metadata

from mcp_bridge.audit import CALLED, AuditLog, AuditWriteError, argument_digests, current_conversation
from mcp_bridge.errors import OutcomeUnknownError, ToolArgumentsError, ToolCallError, ToolNotFoundError
from mcp_bridge.metrics import timed_tool_call
from mcp_bridge.results import ToolResult, from_local
from mcp_bridge.runtime import MCPRuntime
from mcp_bridge.schema import validate_against_schema
from mcp_bridge.sealing import call_digest
from mcp_bridge.skills import Skill

log = logging.getLogger(__name__)

ToolFunction = Callable[..., Any]


class Tool(Protocol):
    """One tool, whatever its source."""

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> str:
        """ "local" or "mcp:<server>", as the skill's tool-source line says."""
        ...

    async def input_schema(self) -> Mapping[str, Any]: ...

    async def trusted_read_only(self) -> bool:
        """True when the tool may run unconfirmed if no skill constrains it."""
        ...

    def honours_idempotency_key(self) -> bool:
        """True when a repeat under the same idempotency key cannot write twice."""
        ...

    async def call(
        self,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str | None,
        slots: Mapping[str, Any] | None = None,
    ) -> ToolResult:
        """Run the tool. ``slots`` are the conversation's slot values at the call: an MCP server's
        ``meta_map.from_slots`` sends some of them in ``_meta``; a local tool gets none of them."""
        ...


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

    async def trusted_read_only(self) -> bool:
        return True  # the bot's own code: confirmed only when a skill says so

    def honours_idempotency_key(self) -> bool:
        return _takes_idempotency_key(self.function)  # declared by its signature

    @timed_tool_call
    async def call(
        self,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str | None,
        slots: Mapping[str, Any] | None = None,
    ) -> ToolResult:
        validate_against_schema(self.name, local_input_schema(self.function), dict(arguments))
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
    name: str
    skill_id: str
    runtime: MCPRuntime
    source: str

    async def input_schema(self) -> Mapping[str, Any]:
        return (await self.runtime.get_tool(self.skill_id, self.name)).input_schema

    async def trusted_read_only(self) -> bool:
        return await self.runtime.is_trusted_read_only(self.skill_id, self.name)

    def honours_idempotency_key(self) -> bool:
        return self.runtime.honours_idempotency_key(self.skill_id, self.name)

    @timed_tool_call
    async def call(
        self,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str | None,
        slots: Mapping[str, Any] | None = None,
    ) -> ToolResult:
        meta = {"idempotency_key": idempotency_key} if idempotency_key else None
        return await self.runtime.invoke(self.skill_id, self.name, arguments, meta=meta, slots=slots)


# -- resolution ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedTool:
    """A resolved tool whose every call is an audit entry of the conversation being served."""

    tool: Tool
    skill_id: str
    audit: AuditLog

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def source(self) -> str:
        return self.tool.source

    async def input_schema(self) -> Mapping[str, Any]:
        return await self.tool.input_schema()

    async def trusted_read_only(self) -> bool:
        return await self.tool.trusted_read_only()

    def honours_idempotency_key(self) -> bool:
        return self.tool.honours_idempotency_key()

    async def call(
        self,
        arguments: Mapping[str, Any],
        *,
        idempotency_key: str | None,
        slots: Mapping[str, Any] | None = None,
    ) -> ToolResult:
        try:
            result = await self.tool.call(arguments, idempotency_key=idempotency_key, slots=slots)
        except ToolCallError as exc:
            self._record(arguments, idempotency_key, f"failed: {type(exc).__name__}", exc.may_have_run)
            raise
        except ToolArgumentsError as exc:
            self._record(arguments, idempotency_key, f"refused: {type(exc).__name__}", False)
            raise
        except Exception as exc:  # unforeseen: it may have reached the tool
            self._record(arguments, idempotency_key, f"failed: {type(exc).__name__}", True)
            raise
        try:
            self._record(arguments, idempotency_key, "ok" if result.ok else f"error: {result.error}", True)
        except AuditWriteError:
            pass  # logged by the audit log; the call ran, and its result must not be lost
        return result

    def _record(self, arguments: Mapping[str, Any], key: str | None, result: str, sent: bool) -> None:
        self.audit.record(
            conversation=current_conversation(),
            skill=self.skill_id,
            tool=self.name,
            source=self.source,
            confirmation=key,
            digest=call_digest(self.skill_id, self.name, self.source, arguments),
            arguments=argument_digests(arguments),
            decision=CALLED,
            result=result,
            # False when the request provably never reached the tool (server unreachable, refused).
            sent=sent,
        )


class ToolBox:
    """Resolves a skill's tool name to a :class:`Tool`: the local function, else the MCP tool.

    With ``audit``, the tools it resolves record every call there (:class:`RecordedTool`).
    """

    def __init__(
        self, local: Mapping[str, ToolFunction], runtime: MCPRuntime | None, *, audit: AuditLog | None = None
    ) -> None:
        self._local = dict(local)
        self.runtime = runtime
        self.audit = audit

    def resolve(self, skill: Skill, name: str) -> Tool:
        tool = self._resolve(skill, name)
        return tool if self.audit is None else RecordedTool(tool, skill.id, self.audit)

    def _resolve(self, skill: Skill, name: str) -> Tool:
        source = skill.tools.get(name)
        if source is not None and source.kind == "local" and name in self._local:
            return LocalTool(name, self._local[name])
        if source is not None and self.runtime is not None and self.runtime.has_mcp_tool(skill.id, name):
            return MCPTool(name, skill.id, self.runtime, str(source))
        raise ToolNotFoundError(
            f"{name!r} is not a local tool of skill {skill.id!r} nor an MCP tool it imports"
        )

    async def aclose(self) -> None:
        if self.runtime is not None:
            await self.runtime.aclose()


async def check_arguments(tool: Tool, arguments: Mapping[str, Any]) -> None:
    """Refuse arguments the tool would refuse, before the person is asked about them."""
    validate_against_schema(tool.name, await tool.input_schema(), dict(arguments))


async def call_exactly_once(
    tool: Tool,
    arguments: Mapping[str, Any],
    idempotency_key: str | None,
    *,
    slots: Mapping[str, Any] | None = None,
) -> ToolResult:
    """Call ``tool``; with a key, repeat once when the outcome is unknown, under the same key, if the
    tool honours the key.

    Safe only because the key makes the store keep the first write if it landed: a tool that is not
    declared to honour it is never repeated, and its unknown outcome stays unknown. A repeat that
    fails too leaves the outcome unknown, never "nothing happened".
    """
    try:
        return await tool.call(arguments, idempotency_key=idempotency_key, slots=slots)
    except ToolCallError as first:
        if not (first.may_have_run and idempotency_key):
            raise
        if not tool.honours_idempotency_key():
            log.warning(
                "outcome of %s unknown (%s); not repeated: its server is not declared to honour the "
                "idempotency key",
                tool.name,
                first,
            )
            raise OutcomeUnknownError(f"{first}; not repeated (the key is not honoured)") from None
        log.warning(
            "outcome of %s unknown (%s); repeating once with the same idempotency key", tool.name, first
        )
        try:
            return await tool.call(arguments, idempotency_key=idempotency_key, slots=slots)
        except (ToolCallError, ToolArgumentsError, ToolNotFoundError) as again:
            raise OutcomeUnknownError(f"{first}; the repeat failed too: {again}") from None

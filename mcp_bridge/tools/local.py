"""The bot's own Python functions as tools: registered by the bot (never by this package), each a
:class:`LocalTool` behind the one interface (:class:`mcp_bridge.tools.sources.Tool`)::

    from mcp_bridge import local_tool

    @local_tool
    async def add_timeline_note(contact_id: int, text: str) -> NoteResult: ...

A local tool's input schema is the one the mcp SDK would publish for it served over MCP, and its
arguments are checked against it before it is called. It honours the idempotency key when it takes
an ``idempotency_key`` parameter. An exception it raises is a :class:`~mcp_bridge.errors.ToolCallError`
that may have written (its ``may_have_run``), logged, never passed on to rasa_sdk.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp_bridge.errors import ToolCallError
from mcp_bridge.mcp_sdk import func_metadata
from mcp_bridge.tools.context import CallContext
from mcp_bridge.tools.results import ToolResult, from_local
from mcp_bridge.tools.schema import validate_against_schema
from mcp_bridge.tools.sources import Annotations

__all__ = [
    "LocalTool",
    "ToolFunction",
    "local_input_schema",
    "local_tool",
    "register_local_tools",
    "registered_local_tools",
]

log = logging.getLogger(__name__)

ToolFunction = Callable[..., Any]

# -- the registry -----------------------------------------------------------------------------

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
    """Every local tool registered so far, ``{name: async function}``."""
    return dict(_REGISTRY)


# -- the tool --------------------------------------------------------------------------------


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
    """A registered function as a :class:`~mcp_bridge.tools.sources.Tool`."""

    name: str
    function: ToolFunction
    source: str = "local"

    async def input_schema(self, context: CallContext) -> Mapping[str, Any]:
        return local_input_schema(self.function)

    async def annotations(self, context: CallContext) -> Annotations:
        # The bot's own code, which claims nothing: the skill that calls it decides.
        return Annotations(read_only=False, vouched=True, destructive=False)

    def honours_idempotency_key(self) -> bool:
        return _takes_idempotency_key(self.function)  # declared by its signature

    async def call(self, arguments: Mapping[str, Any], context: CallContext) -> ToolResult:
        validate_against_schema(self.name, local_input_schema(self.function), arguments)
        kwargs = dict(arguments)
        if context.idempotency_key is not None and _takes_idempotency_key(self.function):
            kwargs["idempotency_key"] = context.idempotency_key
        try:
            value = await self.function(**kwargs)
        except Exception as exc:  # a local tool's bug must not reach rasa_sdk
            log.exception("local tool %r raised", self.name)
            raise _LocalToolFailed(f"local tool {self.name!r} raised {type(exc).__name__}") from exc
        return from_local(self.name, value)

"""The tool sources behind one interface, :class:`Tool`: a local Python function here, a tool of an MCP server
in :mod:`mcp_bridge.mcp_client.tool`.

Everything a skill does with a tool (check its arguments, read its annotations, call it) goes
through these few methods, whatever the source. A local function declares that it honours the
idempotency key by taking an ``idempotency_key`` parameter; an MCP server by
``honours_idempotency_key: true`` in endpoints.yml. Resolution (which tool a skill's name means) is
:class:`mcp_bridge.skills.toolbox.ToolBox`'s; the layers around every call are
:mod:`mcp_bridge.tools.pipeline`'s.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mcp_bridge.errors import ToolCallError
from mcp_bridge.mcp_sdk import func_metadata
from mcp_bridge.tools.context import CallContext
from mcp_bridge.tools.results import ToolResult, from_local
from mcp_bridge.tools.schema import validate_against_schema

__all__ = ["Annotations", "LocalTool", "Tool", "ToolFunction", "local_input_schema"]

log = logging.getLogger(__name__)

ToolFunction = Callable[..., Any]


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


# -- local tools -----------------------------------------------------------------------------


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

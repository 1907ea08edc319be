"""One tool interface, and the layers every call of a resolved tool goes through.

A skill's tool name is resolved once (:class:`mcp_bridge.skills.toolbox.ToolBox`) to one
:class:`~mcp_bridge.tools.sources.Tool`,
a local function or a tool of an MCP server, and wrapped in layers that each add one concern and
implement the same interface, the way pydantic-ai's ``ApprovalRequiredToolset`` wraps a toolset::

    Traced(ExactlyOnce(Audited(Timed(tool))))     # outermost first

* :class:`Traced`: every call is a span (when tracing is on): the tool, where it went, its outcome
  and whether it may have run; a repeat under the same key shows as a second MCP request under it.
* :class:`ExactlyOnce`: a call whose outcome is unknown is repeated once, with the same
  idempotency key, only when the tool honours the key; otherwise its outcome stays unknown.
* :class:`Audited`: every attempt is an entry of the audit trail (``decision: "called"``), of the
  conversation being served and the skill the tool was resolved for.
* :class:`Timed`: every attempt is counted and timed in the metrics.

Whether a call needs a "yes" first is not a layer: it is decided before any call, in
:mod:`mcp_bridge.confirmation.gate`, from the facts a tool gives (``Tool.annotations``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_bridge.errors import (
    OutcomeUnknownError,
    QuestionLapsedError,
    ToolArgumentsError,
    ToolCallError,
    ToolNotFoundError,
    ToolResultInvalidError,
)
from mcp_bridge.observability import metrics, tracing
from mcp_bridge.observability.audit import AuditLog, AuditWriteError
from mcp_bridge.sealing import call_digest
from mcp_bridge.tools.context import CallContext
from mcp_bridge.tools.results import ToolResult
from mcp_bridge.tools.schema import validate_arguments
from mcp_bridge.tools.sources import Annotations, Tool

__all__ = ["Audited", "ExactlyOnce", "Layer", "Timed", "Traced", "check_arguments", "layered"]

log = logging.getLogger(__name__)


async def check_arguments(tool: Tool, arguments: Mapping[str, Any], context: CallContext) -> None:
    """Refuse arguments the tool would refuse, before the person is asked about them."""
    await validate_arguments(tool.name, await tool.input_schema(context), arguments)


@dataclass(frozen=True)
class Layer:
    """A tool around ``inner``: everything but ``call`` is the inner tool's (``name`` and ``source``
    copied once, when the layer is made)."""

    inner: Tool
    name: str
    source: str

    async def input_schema(self, context: CallContext) -> Mapping[str, Any]:
        return await self.inner.input_schema(context)

    async def annotations(self, context: CallContext) -> Annotations:
        return await self.inner.annotations(context)

    def honours_idempotency_key(self) -> bool:
        return self.inner.honours_idempotency_key()


# Reached the tool, which finished its way: a repeat would not tell more (a result that breaks its
# schema again, or a new question for an answer that came too late), so these are passed on as they are.
_NOT_REPEATED = (ToolResultInvalidError, QuestionLapsedError)


@dataclass(frozen=True)
class ExactlyOnce(Layer):
    """With a key, repeat once when the outcome is unknown, under the same key, if the tool honours it.

    Safe only because the key makes the store keep the first write if it landed: a tool that is not
    declared to honour it is never repeated, and its unknown outcome stays unknown. A repeat that
    fails too leaves the outcome unknown, never "nothing happened".
    """

    async def call(self, arguments: Mapping[str, Any], context: CallContext) -> ToolResult:
        idempotency_key = context.idempotency_key
        try:
            return await self.inner.call(arguments, context)
        except ToolCallError as first:
            if not (first.may_have_run and idempotency_key) or isinstance(first, _NOT_REPEATED):
                raise
            if not self.inner.honours_idempotency_key():
                log.warning(
                    "outcome of %s unknown (%s); not repeated: its server is not declared to honour the "
                    "idempotency key",
                    self.name,
                    first,
                )
                raise OutcomeUnknownError(f"{first}; not repeated (the key is not honoured)") from None
            log.warning(
                "outcome of %s unknown (%s); repeating once with the same idempotency key", self.name, first
            )
            try:
                return await self.inner.call(arguments, context)
            except (ToolCallError, ToolArgumentsError, ToolNotFoundError) as again:
                raise OutcomeUnknownError(f"{first}; the repeat failed too: {again}") from None


@dataclass(frozen=True)
class Audited(Layer):
    """Every call is an audit entry of its context's conversation, for the skill it was resolved for.

    An entry that cannot be written after the call ran is logged by the trail and ignored here: the
    call ran, and its result must not be lost.
    """

    skill_id: str
    audit: AuditLog

    async def call(self, arguments: Mapping[str, Any], context: CallContext) -> ToolResult:
        try:
            result = await self.inner.call(arguments, context)
        except ToolCallError as exc:
            self._record(arguments, context, f"failed: {type(exc).__name__}", exc.may_have_run)
            raise
        except ToolArgumentsError as exc:
            self._record(arguments, context, f"refused: {type(exc).__name__}", False)
            raise
        except Exception as exc:  # unforeseen: it may have reached the tool
            self._record(arguments, context, f"failed: {type(exc).__name__}", True)
            raise
        try:
            self._record(arguments, context, "ok" if result.ok else f"error: {result.error}", True)
        except AuditWriteError:
            pass  # logged by the audit log; the call ran, and its result must not be lost
        return result

    def _record(self, arguments: Mapping[str, Any], context: CallContext, result: str, sent: bool) -> None:
        self.audit.called(
            self.skill_id,
            self.name,
            self.source,
            arguments,
            digest=call_digest(self.skill_id, self.name, self.source, arguments),
            conversation=context.conversation_id,
            key=context.idempotency_key,
            result=result,
            sent=sent,
        )


@dataclass(frozen=True)
class Timed(Layer):
    """Every call counted and timed, by tool, source (``local`` or ``mcp``) and outcome."""

    async def call(self, arguments: Mapping[str, Any], context: CallContext) -> ToolResult:
        source = "local" if self.source == "local" else "mcp"
        started = time.perf_counter()
        outcome = "unknown"
        try:
            result = await self.inner.call(arguments, context)
            outcome = "ok" if result.ok else "error"
            return result
        except BaseException as exc:
            outcome = metrics.failure_outcome(exc)
            raise
        finally:
            metrics.observe_tool_call(self.name, source, outcome, time.perf_counter() - started)


@dataclass(frozen=True)
class Traced(Layer):
    """Every call a span of its own (``mcp-bridge tool_call``), for the skill it was resolved for:
    names and outcomes only (:mod:`mcp_bridge.observability.tracing`), never the arguments."""

    skill_id: str

    async def call(self, arguments: Mapping[str, Any], context: CallContext) -> ToolResult:
        server = self.source.removeprefix("mcp:") if self.source.startswith("mcp:") else None
        with tracing.span(
            "mcp-bridge tool_call", skill=self.skill_id, tool=self.name, source=self.source, server=server
        ) as span:
            try:
                result = await self.inner.call(arguments, context)
            except ToolCallError as exc:
                tracing.note(span, outcome=metrics.failure_outcome(exc), may_have_run=exc.may_have_run)
                raise
            except ToolArgumentsError:
                tracing.note(span, outcome="bad_arguments", may_have_run=False)
                raise
            except BaseException as exc:
                tracing.note(span, outcome=metrics.failure_outcome(exc), may_have_run=True)
                raise
            tracing.note(span, outcome="ok" if result.ok else "error", may_have_run=True)
            return result


def layered(tool: Tool, *, skill_id: str, audit: AuditLog | None) -> Tool:
    """``tool`` with every layer: traced, exactly once, audited (with ``audit``, for ``skill_id``),
    timed."""
    name, source = tool.name, tool.source
    inner: Tool = Timed(tool, name, source)
    if audit is not None:
        inner = Audited(inner, name, source, skill_id, audit)
    return Traced(ExactlyOnce(inner, name, source), name, source, skill_id)

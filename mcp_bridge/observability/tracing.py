"""The plugin's spans (OpenTelemetry), and the trace context it sends to MCP servers.

A confirmed call shows in a trace as the skill's run (:mod:`mcp_bridge.action_server.actions`), the gate's
verdict with the rule that gave it (:mod:`mcp_bridge.confirmation.gate`), the question asked, the
answer read (its kind, :mod:`mcp_bridge.reading.reader`), a second approver's wait and a permission's
use (from the audit trail's entries, :func:`audit_span`), and each tool call
(:class:`mcp_bridge.tools.pipeline.Traced`), with the MCP SDK's own client spans and the server's
spans beneath it. The rules, by name:

``where_spans_go``
    rasa-sdk 3.21 builds a tracer provider from the ``tracing:`` block of endpoints.yml and continues
    the ``traceparent`` Rasa sends (its ``create_app.webhook`` and ``ActionExecutor.run`` spans);
    :mod:`mcp_bridge.action_server.server` hands that provider over here (:func:`configure`) when the action
    server starts, and it becomes the process's global provider too when none is set, so the MCP
    SDK's spans (which go to the global one) join the same trace. Run elsewhere (Rasa Pro's own
    process, which sets a global provider), the plugin uses the global provider.
``off_costs_nothing``
    With neither, tracing is off: no span is made, no exporter runs, and a would-be span costs one
    check. rasa-sdk 3.6 has no tracing, and tracing is simply off there.
``names_only``
    Span attributes are names and outcomes under the keys of :data:`ATTRIBUTES` (``mcp_bridge.*``);
    anything else is dropped, so no argument value, note text or answer text reaches a span. A
    failure is recorded by its exception's type name, never its message.
``trace_context``
    A tool call to an MCP server carries the W3C ``traceparent`` and ``tracestate`` in its ``_meta``
    (the MCP specification's trace fields, SEP-414), so the server's own spans join the trace. A
    server configured with ``trace_context: false`` gets neither, from the plugin or from the SDK.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
from collections.abc import Mapping
from typing import Any

from mcp_bridge.observability.audit import CALLED

log = logging.getLogger(__name__)

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate
    from opentelemetry import trace as otel_trace
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # no OpenTelemetry API in this environment: tracing stays off
    otel_trace = None  # type: ignore[assignment]

__all__ = [
    "ATTRIBUTES",
    "audit_span",
    "background",
    "configure",
    "enabled",
    "inject",
    "note",
    "span",
    "trace_context_off",
]

# The attributes a plugin span may carry (``names_only``), each a name or an outcome, never a value.
ATTRIBUTES = frozenset(
    {
        "action",  # the Rasa action that ran
        "skill",  # a skill's id
        "tool",  # a tool's name
        "source",  # local, or mcp:<server>
        "server",  # an MCP server's name
        "outcome",  # what came of a call or a turn (ok, error, timeout, ..., the decision's outcome)
        "may_have_run",  # a failed call may have reached the tool
        "verdict",  # the gate's verdict (Ask, RunConfirmed, ...)
        "rule",  # the gate's rule that gave it (declared, remote_asks, ...)
        "answer",  # the kind of the person's answer (yes, no, unclear, ...)
        "decision",  # an audit entry's decision (asked, confirmed, approval_requested, ...)
        "calls",  # how many calls a question lists
    }
)
_PREFIX = "mcp_bridge."
# An audit entry's decision -> the span it becomes; others become "mcp-bridge decision".
_AUDIT_SPANS: dict[str, str] = {
    "asked": "mcp-bridge question",
    "asked_again": "mcp-bridge question",
    "approval_requested": "mcp-bridge approver_wait",
    "approved": "mcp-bridge approver_decision",
    "approval_refused": "mcp-bridge approver_decision",
    "approval_expired": "mcp-bridge approver_decision",
    "permission_granted": "mcp-bridge permission",
    "permission_used": "mcp-bridge permission",
    "permission_revoked": "mcp-bridge permission",
}


def _version() -> str:
    try:
        return importlib.metadata.version("rasa-mcp-bridge")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class _State:
    tracer: Any = None  # None: tracing is off
    looked_up = False  # configure() ran, or the global provider was looked at


_state = _State()


def configure(provider: Any | None) -> bool:
    """Trace with ``provider`` (rasa-sdk's, from endpoints.yml), or the global provider when it is
    None and one is set; True when tracing is on (``where_spans_go``)."""
    _state.looked_up = True
    _state.tracer = None
    if otel_trace is None:
        return False
    if provider is None:
        provider = _global_provider()
    elif _global_provider() is None:
        otel_trace.set_tracer_provider(provider)  # the MCP SDK's spans join the plugin's
    if provider is None:
        return False
    _state.tracer = provider.get_tracer("mcp_bridge", _version())
    _install_propagator()
    return True


def _global_provider() -> Any | None:
    provider = otel_trace.get_tracer_provider()
    return None if isinstance(provider, otel_trace.ProxyTracerProvider) else provider


def _tracer() -> Any:
    if not _state.looked_up:
        configure(None)
    return _state.tracer


def enabled() -> bool:
    return _tracer() is not None


def _clean(attributes: Mapping[str, Any]) -> dict[str, str | bool | int]:
    """``attributes`` under :data:`ATTRIBUTES` only, prefixed, scalars only (``names_only``)."""
    return {
        _PREFIX + key: value
        for key, value in attributes.items()
        if key in ATTRIBUTES and isinstance(value, str | bool | int) and value is not None
    }


class _Span:
    """A plugin span as a context manager: the span (or None when off) on enter."""

    __slots__ = ("_attributes", "_manager", "_name", "_span", "_tracer")

    def __init__(self, tracer: Any, name: str, attributes: Mapping[str, Any]) -> None:
        self._tracer = tracer
        self._name = name
        self._attributes = attributes
        self._manager: Any = None
        self._span: Any = None

    def __enter__(self) -> Any:
        self._manager = self._tracer.start_as_current_span(
            self._name,
            attributes=_clean(self._attributes),
            record_exception=False,  # an exception's message may quote a value
            set_status_on_exception=False,
        )
        self._span = self._manager.__enter__()
        return self._span

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> Any:
        if kind is not None:
            self._span.set_attribute("error.type", kind.__name__)
            self._span.set_status(Status(StatusCode.ERROR, kind.__name__))
        return self._manager.__exit__(kind, error, traceback)


_OFF: contextlib.nullcontext[None] = contextlib.nullcontext()


def span(name: str, **attributes: Any) -> contextlib.AbstractContextManager[Any]:
    """A span named ``name`` under the current one, with ``attributes`` (keys of :data:`ATTRIBUTES`);
    the span on enter, or None when tracing is off."""
    tracer = _state.tracer if _state.looked_up else _tracer()
    if tracer is None:
        return _OFF
    return _Span(tracer, name, attributes)


def note(current: Any, **attributes: Any) -> None:
    """Add ``attributes`` (keys of :data:`ATTRIBUTES`) to ``current``, a span from :func:`span`."""
    if current is not None:
        current.set_attributes(_clean(attributes))


def audit_span(entry: Mapping[str, Any]) -> None:
    """An :class:`~mcp_bridge.observability.audit.AuditLog` observer: each decision the trail records
    (a question asked, an approver's wait and decision, a permission granted or used) becomes a
    short span under the current one, with its names; a call's entry does not (its call has one)."""
    tracer = _state.tracer if _state.looked_up else _tracer()
    decision = entry.get("decision")
    if tracer is None or decision == CALLED or not isinstance(decision, str):
        return
    attributes = {key: entry.get(key) for key in ("skill", "tool", "source")}
    with span(_AUDIT_SPANS.get(decision, "mcp-bridge decision"), decision=decision, **attributes):
        pass


# -- trace context to MCP servers (``trace_context``) -------------------------------------------

if otel_trace is not None:
    _NO_TRACE_CONTEXT = otel_context.create_key("mcp_bridge.no_trace_context")

    class _Propagator(TextMapPropagator):
        """The process's propagator, except that it injects nothing where the plugin said not to
        (a server with ``trace_context: false``): the MCP SDK injects through the global one."""

        def __init__(self, inner: TextMapPropagator) -> None:
            self.inner = inner

        def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
            if otel_context.get_value(_NO_TRACE_CONTEXT, context):
                return
            if setter is None:
                self.inner.inject(carrier, context=context)
            else:
                self.inner.inject(carrier, context=context, setter=setter)

        def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
            if getter is None:
                return self.inner.extract(carrier, context=context)
            return self.inner.extract(carrier, context=context, getter=getter)

        @property
        def fields(self) -> set[str]:
            return set(self.inner.fields)


def _install_propagator() -> None:
    current = propagate.get_global_textmap()
    if not isinstance(current, _Propagator):
        propagate.set_global_textmap(_Propagator(current))


def inject(meta: dict[str, Any]) -> None:
    """Put the current trace context (``traceparent``, ``tracestate``) into a call's ``_meta``."""
    if _tracer() is not None:
        propagate.inject(meta)


def trace_context_off(off: bool) -> object | None:
    """While the returned token is attached, nothing injects trace context (``off``; None when there
    is nothing to do); give the token to :func:`restore`."""
    if not off or _tracer() is None:
        return None
    return otel_context.attach(otel_context.set_value(_NO_TRACE_CONTEXT, True))


def restore(token: object | None) -> None:
    if token is not None:
        otel_context.detach(token)  # type: ignore[arg-type]


def background(trace_context: bool) -> None:
    """Start the current task (a session's own, which lives across turns) outside any trace, so its
    requests do not join the turn that happened to open it; with ``trace_context`` False, nothing
    it sends carries trace context either."""
    if _tracer() is None:
        return
    fresh = otel_context.Context()
    if not trace_context:
        fresh = otel_context.set_value(_NO_TRACE_CONTEXT, True, fresh)
    otel_context.attach(fresh)  # the task's own copy of the context: never detached

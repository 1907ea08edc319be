"""Prometheus metrics of the bridge: confirmations, tool calls and their latency, MCP sessions.

Fed from three places, so the executor's rules stay free of bookkeeping:

* confirmations from the audit trail: :func:`count_confirmation` is an
:class:`~mcp_bridge.observability.audit.AuditLog`
  observer, so every decision the trail records is counted exactly once, under its own name;
* tool calls from the metrics layer every resolved tool is wrapped in
  (:class:`mcp_bridge.tools.pipeline.Timed`, which calls :func:`observe_tool_call`);
* MCP sessions from :class:`~mcp_bridge.mcp_client.runtime.MCPRuntime`, where a session is opened.

The metrics live in a registry of their own (:data:`REGISTRY`, with the process and platform
collectors), exposed by :func:`attach` at ``/metrics`` on the action server's app, behind whatever
request middleware guards that app. Labels carry names only (decision, tool, source, outcome,
server), never arguments: note text stays out of metrics as it stays out of logs. The same metrics
also go out through OpenTelemetry when endpoints.yml asks for it (:mod:`mcp_bridge.observability.otel`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from mcp_bridge.errors import (
    ServerUnavailableError,
    ToolArgumentsError,
    ToolCallError,
    ToolNotFoundError,
    ToolTimeoutError,
)
from mcp_bridge.observability import otel
from mcp_bridge.observability.audit import CALLED, AuditDecision

__all__ = [
    "CONFIRMATIONS",
    "DECISIONS",
    "MCP_SESSIONS_OPENED",
    "REGISTRY",
    "TOOL_CALLS",
    "TOOL_CALL_SECONDS",
    "attach",
    "count_confirmation",
    "exposition",
    "failure_outcome",
    "observe_tool_call",
]

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

# Decisions shown from the first scrape on (at 0), so a rate over them is defined before the first
# one happens. The audit trail's other entries (asked_again, executed, unclear, ...) are counted too.
DECISIONS: tuple[AuditDecision, ...] = (
    "asked",
    "confirmed",
    "denied",
    "edited",
    "expired",
    "rejected",
    "refused",
)

CONFIRMATIONS = Counter(
    "mcp_bridge_confirmations",
    "Confirmation events from the audit trail, by decision: asked, confirmed, denied, edited, "
    "expired, rejected, refused (and asked_again, executed, unclear).",
    ["decision"],
    registry=REGISTRY,
)
TOOL_CALLS = Counter(
    "mcp_bridge_tool_calls",
    "Tool calls by tool, source (local or mcp) and outcome: ok, error (the tool said ok: false), "
    "bad_arguments, unavailable (never ran), timeout or unknown (may have run), cancelled.",
    ["tool", "source", "outcome"],
    registry=REGISTRY,
)
TOOL_CALL_SECONDS = Histogram(
    "mcp_bridge_tool_call_seconds",
    "Time from dispatch to result (or failure) of one tool call, by tool and source.",
    ["tool", "source"],
    # A warm MCP call is a few milliseconds; a timeout is the server's configured seconds.
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY,
)
MCP_SESSIONS_OPENED = Counter(
    "mcp_bridge_mcp_sessions_opened",
    "MCP sessions opened, by server (one per server while it stays up; more mean reconnects).",
    ["server"],
    registry=REGISTRY,
)

for _decision in DECISIONS:
    CONFIRMATIONS.labels(decision=_decision)


def count_confirmation(entry: Mapping[str, Any]) -> None:
    """An AuditLog observer: count one confirmation entry under its decision.

    Tool-call entries (``called``) are not confirmations; tool calls have their own counter.
    """
    decision = entry.get("decision")
    if isinstance(decision, str) and decision and decision != CALLED:
        CONFIRMATIONS.labels(decision=decision).inc()
        otel.confirmation(decision)


def opened_session(server: str) -> None:
    MCP_SESSIONS_OPENED.labels(server=server).inc()
    otel.session_opened(server)


def observe_tool_call(tool: str, source: str, outcome: str, seconds: float) -> None:
    """Count and time one tool call; ``source`` is where it really went: ``local`` or ``mcp``."""
    TOOL_CALL_SECONDS.labels(tool=tool, source=source).observe(seconds)
    TOOL_CALLS.labels(tool=tool, source=source, outcome=outcome).inc()
    otel.tool_call(tool, source, outcome, seconds)


def failure_outcome(exc: BaseException) -> str:
    """The ``outcome`` label of a call that raised ``exc``."""
    if isinstance(exc, ToolArgumentsError):
        return "bad_arguments"
    if isinstance(exc, ToolNotFoundError):
        return "not_found"  # e.g. an MCP server that stopped serving the tool
    if isinstance(exc, ToolTimeoutError):
        return "timeout"
    if isinstance(exc, ServerUnavailableError):
        return "unavailable"
    if isinstance(exc, ToolCallError):
        return "unknown" if exc.may_have_run else "unavailable"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    return "unknown"


def exposition() -> tuple[bytes, str]:
    """The current metrics in Prometheus' text format, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def attach(app: Any, path: str = "/metrics") -> None:
    """Serve the metrics at ``path`` (GET) on a Sanic app, such as rasa_sdk's action server.

    The route sits behind the app's request middleware, so an action server that requires its
    token on /webhook requires it here too.
    """
    from sanic import response  # the action server's framework; imported only where it runs

    async def metrics_endpoint(request: Any) -> Any:
        body, content_type = exposition()
        return response.raw(body, content_type=content_type)

    app.add_route(metrics_endpoint, path, methods=["GET"], name="mcp_bridge_metrics")

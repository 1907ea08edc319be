"""The CRM's MCP server in its caller's trace (OpenTelemetry).

The mcp SDK's server wraps every request in a span of its own (``tools/call add_timeline_note``) and
continues the W3C trace context the request carries in ``_meta`` (``traceparent``, ``tracestate``: the
MCP specification's trace fields, which the bridge sends), so the server's spans join the trace of the
turn that made the call. The SDK's spans go to the global tracer provider, which this module sets when
``CRM_OTLP_ENDPOINT`` names an OTLP gRPC receiver (``host:port``: a Collector, Jaeger, Phoenix) to
export them to, under the service name ``crm-mcp``. Unset, nothing is set up and nothing is sent.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

SERVICE_NAME = "crm-mcp"


def configure() -> bool:
    """Export the server's spans to CRM_OTLP_ENDPOINT; True when set up."""
    endpoint = os.environ.get("CRM_OTLP_ENDPOINT")
    if not endpoint:
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("CRM_OTLP_ENDPOINT is set, but OpenTelemetry's SDK and OTLP exporter are not installed")
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
    trace.set_tracer_provider(provider)  # flushed at exit (the provider's own atexit hook)
    log.info("CRM MCP server: spans to %s", endpoint)
    return True

"""Metrics and audit entries through OpenTelemetry (mcp_bridge.observability.otel): the Prometheus
metrics' twins on a meter, each audit entry a log record under the current span, what endpoints.yml
asks for checked with file, place and reason, and nothing made when nothing is asked for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="OpenTelemetry's SDK (rasa-sdk 3.21 brings it)")

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from mcp_bridge.errors import ConfigError
from mcp_bridge.observability import metrics, otel
from mcp_bridge.observability.audit import AuditKeys, AuditLog
from mcp_bridge.sealing import call_digest


@pytest.fixture
def reset() -> Iterator[None]:
    yield
    otel.shutdown()


def _points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    value = point.count if value is None else value
                    found.setdefault(metric.name, []).append((dict(point.attributes or {}), value))
    return found


def test_the_metrics_go_to_an_opentelemetry_meter_too(reset: None) -> None:
    reader = InMemoryMetricReader()
    otel.configure_metrics(MeterProvider(metric_readers=[reader]))
    metrics.count_confirmation({"decision": "confirmed"})
    metrics.count_confirmation({"decision": "called"})  # a call is not a confirmation
    metrics.observe_tool_call("add_timeline_note", "mcp", "ok", 0.004)
    metrics.opened_session("crm")
    points = _points(reader)
    assert points["mcp_bridge_confirmations"] == [({"decision": "confirmed"}, 1)]
    assert points["mcp_bridge_tool_calls"] == [
        ({"tool": "add_timeline_note", "source": "mcp", "outcome": "ok"}, 1)
    ]
    assert points["mcp_bridge_tool_call_seconds"] == [({"tool": "add_timeline_note", "source": "mcp"}, 1)]
    assert points["mcp_bridge_mcp_sessions_opened"] == [({"server": "crm"}, 1)]


def test_each_audit_entry_is_a_log_record_under_the_current_span(tmp_path: Path, reset: None) -> None:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    otel.configure_logs(provider)
    trail = AuditLog(tmp_path / "audit.jsonl", keys=AuditKeys.random(), observers=[otel.audit_record])
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("turn") as span:
        trail.called(
            "log_interaction",
            "add_timeline_note",
            "mcp:crm",
            {"text": "a note"},
            digest=call_digest("log_interaction", "add_timeline_note", "mcp:crm", {"text": "a note"}),
            conversation="c",
            key="k",
            result="ok",
            sent=True,
        )
    [record] = [data.log_record for data in exporter.get_finished_logs()]
    assert json.loads(str(record.body)) == trail.entries()[-1]  # the line the file holds, MAC and all
    assert dict(record.attributes or {})["mcp_bridge.decision"] == "called"
    assert record.trace_id == span.get_span_context().trace_id
    assert "a note" not in str(record.body)


def test_endpoints_yml_says_where_they_go(tmp_path: Path) -> None:
    endpoints = tmp_path / "endpoints.yml"
    endpoints.write_text(
        "tracing: {type: jaeger, host: 127.0.0.1, port: 4317}\n"
        "metrics: {type: otlp, endpoint: 127.0.0.1:4317, insecure: true, interval: 5}\n"
    )
    tracing_collector, metrics_collector, interval = otel.collectors(endpoints)
    assert tracing_collector == otel.Collector("127.0.0.1:4317", insecure=True)
    assert metrics_collector == otel.Collector("127.0.0.1:4317", insecure=True)
    assert interval == 5
    endpoints.write_text("metrics: {type: prometheus}\n")
    with pytest.raises(ConfigError, match=r"endpoints.yml: metrics.type: 'prometheus' is not supported"):
        otel.collectors(endpoints)
    endpoints.write_text("metrics: {type: otlp}\n")
    with pytest.raises(ConfigError, match=r"metrics.endpoint: missing"):
        otel.collectors(endpoints)
    endpoints.write_text("action_endpoint: {url: 'http://x'}\n")
    with pytest.raises(
        ConfigError, match="AUDIT_OTLP_LOGS=1 sends audit entries to the collector of the tracing"
    ):
        otel.start(endpoints, audit_records=True, service_name="rasa_sdk")


def test_nothing_is_made_when_nothing_is_asked_for(tmp_path: Path) -> None:
    endpoints = tmp_path / "endpoints.yml"
    endpoints.write_text("tracing: {type: otlp, endpoint: 127.0.0.1:4317, insecure: true}\n")
    assert otel.start(endpoints, audit_records=False, service_name="rasa_sdk") == []
    assert otel._state.providers == [] and otel._state.instruments is None and otel._state.logger is None

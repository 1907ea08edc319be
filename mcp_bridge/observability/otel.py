"""Metrics and audit entries through OpenTelemetry, beside Prometheus and the audit file.

The rules, by name:

``metrics_offered``
    The metrics stay on Prometheus (:mod:`mcp_bridge.observability.metrics`, ``/metrics``). When the
    action server's endpoints.yml has a ``metrics:`` block, in Rasa Pro's shape (``type: otlp``,
    ``endpoint``, ``insecure``, ``root_certificates``), the same counters and histogram, under the
    same names and labels, are also recorded as OpenTelemetry instruments and exported there by OTLP
    (gRPC) every ``interval`` seconds (60 by default): a Rasa team that collects Rasa Pro's metrics
    with an OpenTelemetry Collector gets the plugin's from the same collector.
``audit_records``
    With ``AUDIT_OTLP_LOGS=1``, each audit entry also goes out as an OpenTelemetry log record: its
    body the entry as the file holds it (digests, never values), its attributes the decision, skill
    and tool, its trace and span those of the span it was recorded under. They go by OTLP (gRPC) to
    the collector of the ``tracing:`` block (``type: otlp``: its ``endpoint``; ``type: jaeger``:
    ``host:port``), so the trail leaves the host as it is written.
``needs_the_exporter``
    Both need OpenTelemetry's SDK and OTLP exporter, which rasa-sdk 3.21 brings; asked for where
    they are missing (rasa-sdk 3.6), the action server does not start, saying so.

Nothing here runs unless configured: without a ``metrics:`` block and ``AUDIT_OTLP_LOGS``, no
provider is made and no exporter runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_bridge.config.yamlfile import load_yaml
from mcp_bridge.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["audit_record", "configure_logs", "configure_metrics", "shutdown", "start"]

DEFAULT_INTERVAL = 60.0


@dataclass(frozen=True)
class Collector:
    """Where OTLP goes: a gRPC endpoint (``host:port`` or a URL), plain or with TLS."""

    endpoint: str
    insecure: bool = False
    root_certificates: str | None = None


class _Instruments:
    """The Prometheus metrics' twins (same names, same labels) on an OpenTelemetry meter."""

    def __init__(self, meter: Any) -> None:
        self.confirmations = meter.create_counter(
            "mcp_bridge_confirmations", description="Confirmation events from the audit trail, by decision."
        )
        self.tool_calls = meter.create_counter(
            "mcp_bridge_tool_calls", description="Tool calls by tool, source and outcome."
        )
        self.tool_call_seconds = meter.create_histogram(
            "mcp_bridge_tool_call_seconds",
            unit="s",
            description="Time from dispatch to result (or failure) of one tool call, by tool and source.",
        )
        self.sessions = meter.create_counter(
            "mcp_bridge_mcp_sessions_opened", description="MCP sessions opened, by server."
        )


class _State:
    instruments: _Instruments | None = None
    logger: Any = None
    providers: list[Any] = []


_state = _State()


def configure_metrics(meter_provider: Any | None) -> None:
    """Record the plugin's metrics on ``meter_provider`` too (None: Prometheus only)."""
    _state.instruments = (
        None if meter_provider is None else _Instruments(meter_provider.get_meter("mcp_bridge"))
    )


def configure_logs(logger_provider: Any | None) -> None:
    """Send audit entries as log records through ``logger_provider`` (None: the file only)."""
    _state.logger = None if logger_provider is None else logger_provider.get_logger("mcp_bridge.audit")


def confirmation(decision: str) -> None:
    if _state.instruments is not None:
        _state.instruments.confirmations.add(1, {"decision": decision})


def tool_call(tool: str, source: str, outcome: str, seconds: float) -> None:
    if _state.instruments is not None:
        _state.instruments.tool_call_seconds.record(seconds, {"tool": tool, "source": source})
        _state.instruments.tool_calls.add(1, {"tool": tool, "source": source, "outcome": outcome})


def session_opened(server: str) -> None:
    if _state.instruments is not None:
        _state.instruments.sessions.add(1, {"server": server})


def audit_record(entry: Mapping[str, Any]) -> None:
    """An :class:`~mcp_bridge.observability.audit.AuditLog` observer: the entry as a log record
    (``audit_records``), under the current span."""
    if _state.logger is None:
        return
    import json

    from opentelemetry._logs import SeverityNumber

    attributes = {
        f"mcp_bridge.{key}": entry[key]
        for key in ("decision", "skill", "tool", "source")
        if isinstance(entry.get(key), str)
    }
    _state.logger.emit(
        body=json.dumps(dict(entry), ensure_ascii=False, sort_keys=True),
        attributes=attributes,
        event_name="mcp_bridge.audit",
        severity_number=SeverityNumber.INFO,
        severity_text="INFO",
    )


# -- from endpoints.yml ---------------------------------------------------------------------------


def collectors(endpoints: str | Path) -> tuple[Collector | None, Collector | None, float]:
    """The ``tracing:`` and ``metrics:`` blocks of ``endpoints`` as collectors (None when absent),
    and the metrics' export interval; ConfigError (file, place, reason) for a block it cannot use."""
    path = Path(endpoints)
    document = load_yaml(path) if path.exists() else None
    document = document if isinstance(document, dict) else {}
    interval = DEFAULT_INTERVAL
    metrics_block = document.get("metrics")
    if isinstance(metrics_block, dict) and "interval" in metrics_block:
        raw = metrics_block["interval"]
        if not isinstance(raw, int | float) or isinstance(raw, bool) or not raw > 0:
            raise ConfigError(f"{path}: metrics.interval must be a positive number of seconds")
        interval = float(raw)
    return (
        _collector(path, "tracing", document.get("tracing")),
        _collector(path, "metrics", metrics_block),
        interval,
    )


def _collector(path: Path, key: str, block: Any) -> Collector | None:
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ConfigError(f"{path}: {key} must be a mapping (type: otlp, endpoint: ...)")
    kind = block.get("type")
    if kind == "jaeger" and key == "tracing":  # rasa-sdk 3.21 sends these by OTLP too
        return Collector(f"{block.get('host', 'localhost')}:{block.get('port', 4317)}", insecure=True)
    if kind != "otlp":
        raise ConfigError(f"{path}: {key}.type: {kind!r} is not supported; use otlp")
    endpoint = block.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise ConfigError(f"{path}: {key}.endpoint: missing (host:port of an OTLP gRPC receiver)")
    certificates = block.get("root_certificates")
    return Collector(
        endpoint, bool(block.get("insecure", False)), str(certificates) if certificates else None
    )


def start(endpoints: str | Path, *, audit_records: bool, service_name: str) -> list[str]:
    """Start what endpoints.yml asks for (``metrics_offered``) and, when ``audit_records``
    (AUDIT_OTLP_LOGS=1), the audit entries as log records; the telemetry carries ``service_name``
    (RASA_SDK_TRACING_SERVICE_NAME). What was started, in words, for the log."""
    tracing, metrics, interval = collectors(endpoints)
    started = []
    if metrics is not None:
        configure_metrics(_meter_provider(metrics, interval, service_name))
        started.append(f"metrics by OTLP to {metrics.endpoint} every {interval:g} s")
    if audit_records:
        if tracing is None:
            raise ConfigError(
                f"{endpoints}: AUDIT_OTLP_LOGS=1 sends audit entries to the collector of the tracing: "
                "block, and there is none"
            )
        configure_logs(_logger_provider(tracing, service_name))
        started.append(f"audit entries as log records by OTLP to {tracing.endpoint}")
    return started


def _credentials(collector: Collector) -> Any:
    if collector.insecure or collector.root_certificates is None:
        return None
    import grpc

    return grpc.ssl_channel_credentials(root_certificates=Path(collector.root_certificates).read_bytes())


def _resource(service_name: str) -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    return Resource.create({SERVICE_NAME: service_name})


def _missing(what: str) -> ConfigError:
    return ConfigError(
        f"{what} needs OpenTelemetry's SDK and OTLP exporter (opentelemetry-sdk, "
        "opentelemetry-exporter-otlp-proto-grpc), which rasa-sdk 3.21 brings and this environment lacks"
    )


def _meter_provider(collector: Collector, interval: float, service_name: str) -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    except ImportError:
        raise _missing("metrics: in endpoints.yml") from None
    exporter = OTLPMetricExporter(
        endpoint=collector.endpoint, insecure=collector.insecure, credentials=_credentials(collector)
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=interval * 1000)
    provider = MeterProvider(resource=_resource(service_name), metric_readers=[reader])
    _state.providers.append(provider)
    return provider


def _logger_provider(collector: Collector, service_name: str) -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    except ImportError:
        raise _missing("AUDIT_OTLP_LOGS=1") from None
    exporter = OTLPLogExporter(
        endpoint=collector.endpoint, insecure=collector.insecure, credentials=_credentials(collector)
    )
    provider = LoggerProvider(resource=_resource(service_name))
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    _state.providers.append(provider)
    return provider


def shutdown() -> None:
    """Export what is left and stop the providers :func:`start` made."""
    while _state.providers:
        provider = _state.providers.pop()
        try:
            provider.shutdown()
        except Exception:  # the process is stopping: what could not be sent is lost, and said
            log.exception("an OpenTelemetry provider did not shut down cleanly")
    configure_metrics(None)
    configure_logs(None)

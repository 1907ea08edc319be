"""What the plugin tells its operators: the audit trail (chained, keyed), Prometheus metrics, and
OpenTelemetry spans (and, when configured, metrics and audit entries by OTLP)."""

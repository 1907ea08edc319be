"""What the plugin tells its operators: the audit trail and Prometheus metrics."""

"""End-to-end tests against a real OpenTelemetry Collector and VictoriaMetrics on 127.0.0.1."""

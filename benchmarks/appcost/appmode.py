"""What an instrumented application sets up, chosen by ``PROCESS_OVERHEAD_MODE`` (JSON).

Shared by the pyperf workers (``sitecustomize.py``) and the web applications
(``fastapi_app.py``, ``gunicorn.conf.py``) of the application-cost benchmarks.
The mode is ``{"kind": ..., "options": {...}, "interval_ms": ...}``: an SDK
``MeterProvider`` with a ``PeriodicExportingMetricReader`` every
``interval_ms``, whose exporter encodes each export as an OTLP request, as the
OTLP exporters do, and drops it (no network: its cost is the encoding's);
then ``kind``: ``none`` (nothing at all, not even the SDK), ``baseline`` (the
provider and reader alone), ``ours`` (``ProcessInstrumentor`` with
``options``) or ``peer`` (``SystemMetricsInstrumentor()``, its shipped default).
"""

from __future__ import annotations

import json
import os
from typing import Any

ENV = "PROCESS_OVERHEAD_MODE"
KINDS = ("none", "baseline", "ours", "peer")
PROBES = ("event_loop", "gc_pause_histogram", "per_thread", "children", "gil_wait")
"""The opt-in options measured one at a time on top of the defaults, each a mode."""


def from_env() -> dict[str, Any] | None:
    raw = os.environ.get(ENV)
    return json.loads(raw) if raw else None


def setup(mode: dict[str, Any]) -> Any:
    """Sets ``mode`` up in this process; returns its MeterProvider (None for ``none``)."""
    kind = mode["kind"]
    if kind not in KINDS:
        raise ValueError(f"{ENV}: kind {kind!r} is not one of {KINDS}")
    if kind == "none":
        return None
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        PeriodicExportingMetricReader,
    )

    class EncodingExporter(MetricExporter):  # type: ignore[misc]
        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> Any:
            encode_metrics(metrics_data).SerializeToString()
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kw: Any) -> None:
            return None

    reader = PeriodicExportingMetricReader(
        EncodingExporter(), export_interval_millis=float(mode["interval_ms"])
    )
    provider = MeterProvider(metric_readers=[reader])
    if kind == "ours":
        from opentelemetry.instrumentation.process import ProcessInstrumentor

        ProcessInstrumentor().instrument(meter_provider=provider, **(mode.get("options") or {}))
    elif kind == "peer":
        from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor

        SystemMetricsInstrumentor().instrument(meter_provider=provider)
    return provider


def describe(mode: dict[str, Any]) -> dict[str, Any]:
    """What this process runs: the mode's name and kind, and which instrumentors are on."""
    from opentelemetry.instrumentation.process import ProcessInstrumentor

    ours = ProcessInstrumentor()
    peer = None
    if mode["kind"] == "peer":
        from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor

        peer = SystemMetricsInstrumentor().is_instrumented_by_opentelemetry
    return {
        "name": mode.get("name"),
        "kind": mode["kind"],
        "ours": ours.is_instrumented_by_opentelemetry,
        "options": ours.options is not None
        and {k: getattr(ours.options, k) for k in (mode.get("options") or {})},
        "peer": peer,
    }

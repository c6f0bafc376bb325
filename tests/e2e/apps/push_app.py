"""An application instrumented in code, pushing its process metrics over OTLP.

    python push_app.py grpc|http

The SDK is set up the usual way: a MeterProvider with a periodic reader and an
OTLP exporter, made global, then ``ProcessInstrumentor().instrument()``. The
exporter reads its endpoint and timeout from the standard ``OTEL_EXPORTER_OTLP_*``
variables, the reader its interval from ``OTEL_METRIC_EXPORT_INTERVAL``, the
resource ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``.

What the tests need to check the values, from ``E2E_*`` variables:
``E2E_BALLAST_MB`` bytes kept resident; ``E2E_BURN_S`` CPU seconds burned at
start; ``E2E_WORK=1`` keeps doing small units of work (allocations, CPU) instead
of idling; ``E2E_SECONDS`` ends it (default 120), as does SIGTERM. It prints
``ready`` once instrumented and ``beat N`` after each unit of work or idle tick.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader

from opentelemetry import metrics
from opentelemetry.instrumentation.process import ProcessInstrumentor


def exporter(protocol: str) -> MetricExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HTTPExporter,
        )

        return HTTPExporter()
    raise SystemExit(f"protocol must be grpc or http, not {protocol!r}")


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        x += sum(range(1000))


def main() -> None:
    # Touched, so that it is resident: b"..." * n writes every page.
    ballast = b"\xa5" * (int(os.environ.get("E2E_BALLAST_MB", "0")) << 20)
    burn(float(os.environ.get("E2E_BURN_S", "0")))
    work = os.environ.get("E2E_WORK") == "1"

    provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter(sys.argv[1]))])
    metrics.set_meter_provider(provider)
    ProcessInstrumentor().instrument()
    print(f"ready {os.getpid()}", flush=True)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + float(os.environ.get("E2E_SECONDS", "120"))
    beat = 0
    while not stop.is_set() and time.monotonic() < deadline:
        if work:
            garbage = [str(i) * 10 for i in range(20_000)]  # short-lived, freed each beat
            del garbage
        stop.wait(0.05)
        beat += 1
        print(f"beat {beat}", flush=True)
    provider.shutdown()
    print(f"done {len(ballast)}", flush=True)


if __name__ == "__main__":
    main()

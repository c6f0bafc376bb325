"""The README's demo: instrument a small workload and print its metrics.

Runs for a few seconds with the console exporter, one line per data point.
Environment: DEMO_SECONDS (default 3), DEMO_INTERVAL_MS (default 1000).
"""

from __future__ import annotations

import os
import threading
import time

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricsData,
    PeriodicExportingMetricReader,
)

from opentelemetry.instrumentation.process import ProcessInstrumentor


def one_line_per_point(data: MetricsData) -> str:
    lines = ["--- export ---"]
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    attrs = ", ".join(f"{k}={v}" for k, v in point.attributes.items())
                    value = getattr(point, "value", None)
                    lines.append(f"{metric.name}{{{attrs}}} = {value} {metric.unit}")
    return "\n".join(lines) + "\n"


def workload(stop: threading.Event) -> None:
    """Burn some CPU and allocate a little memory, like a busy service would."""
    keep = []
    while not stop.is_set():
        keep.append(bytearray(64 * 1024))
        sum(i * i for i in range(20_000))
        if len(keep) > 200:
            keep.clear()


def main() -> None:
    seconds = float(os.environ.get("DEMO_SECONDS", "3"))
    interval = int(os.environ.get("DEMO_INTERVAL_MS", "1000"))
    exporter = ConsoleMetricExporter(formatter=one_line_per_point)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=interval)
    provider = MeterProvider(metric_readers=[reader])
    ProcessInstrumentor().instrument(meter_provider=provider)

    stop = threading.Event()
    worker = threading.Thread(target=workload, args=(stop,), name="demo-workload")
    worker.start()
    time.sleep(seconds)
    stop.set()
    worker.join()
    ProcessInstrumentor().uninstrument()
    provider.shutdown()


if __name__ == "__main__":
    main()
